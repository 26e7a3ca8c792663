"""The splice workload the benchmarks share: one long real prefix, N short real suffixes.

Defined once in the package (`nudgeability.splice.run.bench`, which `nudge bench` runs); the scripts
here import it from this module.
"""

from nudgeability.splice.run.bench import SENTENCES, Workload, musique_text, splice_workload

__all__ = ["SENTENCES", "Workload", "musique_text", "splice_workload"]
