"""The `nudge` command line: run, merge, stats, report.

Each subcommand lives with the code it drives and registers itself here through a
`register(subparsers)` function that sets `func` on its parser. Errors the user can fix are
`ValueError`s (or `OSError`s) whose message names the file, line or field: they print as one line
and exit with status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module path -> the subcommands it registers
_SUBCOMMANDS = (
    "nudgeability.splice.run_cli",
    "nudgeability.stats.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nudge",
        description="Measure how reasoning models respond to confidence and doubt (Nudgeability).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"nudge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nudge {args.command}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
