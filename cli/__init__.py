"""The `nudge` command line: one thin module per command (cli/README.md)."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> the module that registers it. Only the chosen command's module is imported, so
# `nudge run` does not pay for matplotlib and numba, nor `nudge stats` for torch.
_SUBCOMMANDS = {
    "run": "nudgeability.cli.run",
    "merge": "nudgeability.cli.merge",
    "bench": "nudgeability.cli.bench",
    "verify": "nudgeability.cli.verify",
    "stats": "nudgeability.cli.stats",
    "report": "nudgeability.cli.report",
    "plan": "nudgeability.cli.plan",
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


def values_kept(argv: list[str]) -> list[str]:
    """`--flag -5,3` as `--flag=-5,3`: argparse reads a value that starts with '-' and is not a
    plain number as another flag, and would print the usage instead of the flag's own check
    (every nudge value that starts with '-' and a digit is a value: no flag or path does)."""
    kept: list[str] = []
    for arg in argv:
        previous = kept[-1] if kept else ""
        if (
            arg[:1] == "-"
            and arg[1:2].isdigit()
            and previous.startswith("--")
            and "=" not in previous
        ):
            kept[-1] = f"{previous}={arg}"
        else:
            kept.append(arg)
    return kept


def main(argv: list[str] | None = None) -> int:
    argv = values_kept(sys.argv[1:] if argv is None else list(argv))
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
