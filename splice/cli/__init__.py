"""The `nudge` command line: run, merge, bench, verify, stats, report.

One small module per command (`splice/cli/<command>.py`) holds its flags, one call into the
library and the printing of the result; it registers itself here through a `register(subparsers)`
function that sets `func` on its parser. Errors the user can fix are
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
    "run": "nudgeability.splice.cli.run",
    "merge": "nudgeability.splice.cli.merge",
    "bench": "nudgeability.splice.cli.bench",
    "verify": "nudgeability.splice.cli.verify",
    "stats": "nudgeability.splice.cli.stats",
    "report": "nudgeability.splice.cli.report",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `nudge` parser, with the subcommand named in `argv` (or, for help, every subcommand)."""
    parser = argparse.ArgumentParser(
        prog="nudge",
        description="Measure how reasoning models respond to confidence and doubt (Nudgeability).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next((a for a in (argv or []) if not a.startswith("-")), None)
    commands = [first] if first in _SUBCOMMANDS else list(_SUBCOMMANDS)
    for command in commands:
        if command not in subparsers.choices:  # a module may register more than its own command
            importlib.import_module(_SUBCOMMANDS[command]).register(subparsers)
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
