"""`nudge stats RUN_DIR... --out DIR`: the statistics of one or more run directories.

The flags and the pipeline are the stats package's (nudgeability.stats); until the stats
command's argparse moves here, its registration (which adds `nudge report` too) is re-exported.
"""

from nudgeability.stats.cli import register

__all__ = ["register"]
