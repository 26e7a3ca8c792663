"""What computes the records of one chunk: bases, arms and the optional phases."""

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
