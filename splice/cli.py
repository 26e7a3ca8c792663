"""The `nudge` command line: run, merge, verify, stats, report, bench.

Each subcommand lives with the code it drives and registers itself here through a
`register(subparsers)` function that sets `func` on its parser. Errors the user can fix are
`ValueError`s (or `OSError`s) whose message names the file, line or field: they print as one line
and exit with status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> the module that registers it. Only the chosen command's module is imported, so
# `nudge run` does not pay for matplotlib and numba, nor `nudge stats` for torch.
_SUBCOMMANDS = {
    "run": "nudgeability.splice.run_cli",
    "bench": "nudgeability.splice.bench_cli",
    "merge": "nudgeability.splice.run_cli",
    "verify": "nudgeability.splice.verify_cli",
    "stats": "nudgeability.stats.cli",
    "report": "nudgeability.stats.cli",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `nudge` parser, with the subcommand named in `argv` (or, for help, every subcommand)."""
    parser = argparse.ArgumentParser(
        prog="nudge",
        description="Measure how reasoning models respond to confidence and doubt (Nudgeability).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next((a for a in (argv or []) if not a.startswith("-")), None)
    modules = (
        [_SUBCOMMANDS[first]]
        if first in _SUBCOMMANDS
        else list(dict.fromkeys(_SUBCOMMANDS.values()))
    )
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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
        print(
            f"nudge {args.command}: interrupted; run the same command again to resume",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
