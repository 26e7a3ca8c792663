"""What a run, or the paper's whole campaign, will cost before it runs (`nudge plan`)."""

from .rates import Rates
from .run_estimate import RunEstimate, estimate_run
from .workload import Lengths, Workload

__all__ = ["Lengths", "Rates", "RunEstimate", "Workload", "estimate_run"]
