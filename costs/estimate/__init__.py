"""What a run, or the paper's whole campaign, will cost before it runs (`nudge plan`).

See costs/README.md: the workload (workload.py), the measured rates (rates.py), the schedule
followed step by step (schedule.py), one run (run_estimate.py), the paper's campaign
(campaign.py).
"""

from .rates import Rates
from .run_estimate import RunEstimate, estimate_run
from .workload import Lengths, Workload

__all__ = ["Lengths", "Rates", "RunEstimate", "Workload", "estimate_run"]
