"""`nudge merge OUT SHARD_DIR...`: join the outputs of `nudge run --shard K/N` (splice/rundir/merge.py).

nudge merge runs/x runs/x-shard1 ... runs/x-shard8
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    """Add the `merge` subcommand to the `nudge` parser."""
    merge = subparsers.add_parser(
        "merge",
        help="join the outputs of `nudge run --shard K/N`",
        description="Join complete shard directories (all N of them, with "
        "matching manifests) into the unsharded run's output.",
    )
    merge.add_argument("out", help="the directory to write (must not exist)")
    merge.add_argument(
        "shard_dirs", nargs="+", metavar="SHARD_DIR", help="the shards' output directories"
    )
    merge.set_defaults(func=_merge)


def _merge(args: argparse.Namespace) -> int:
    from nudgeability.splice.rundir.merge import merge

    result = merge(args.out, args.shard_dirs)
    if result.provenance_changes:
        print(
            f"nudge merge: warning: the shards ran different code ({'; '.join(result.provenance_changes)}); "
            "the merged manifest keeps the first shard's",
            file=sys.stderr,
        )
    print(
        f"nudge merge: {result.records} records from {result.shards} shards in {result.out}",
        file=sys.stderr,
    )
    return 0
