"""The units of a run: what computes the records of one chunk (base.py, arms.py, and the optional
phases: consistency.py, signals.py, likelihoods.py, resolve.py). The names the runner and the
stream use are imported here."""

from nudgeability.splice.run.units.arms import (
    ArmGroup,
    arm_record,
    arm_records,
    arm_request,
    arm_requests,
    in_arm_order,
    run_arms_unit,
)
from nudgeability.splice.run.units.base import (
    CutWatch,
    UnitContext,
    UnitCounts,
    base_inputs,
    base_record,
    run_base_unit,
)

__all__ = [
    "ArmGroup",
    "CutWatch",
    "UnitContext",
    "UnitCounts",
    "arm_record",
    "arm_records",
    "arm_request",
    "arm_requests",
    "base_inputs",
    "base_record",
    "in_arm_order",
    "run_arms_unit",
    "run_base_unit",
]
