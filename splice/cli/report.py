"""`nudge report DIR --out FIGS`: the figures of a `nudge stats` output.

The flags and the pipeline are the stats package's (nudgeability.stats); until the report
command's argparse moves here, its registration (which adds `nudge stats` too) is re-exported.
"""

from nudgeability.stats.cli import register

__all__ = ["register"]
