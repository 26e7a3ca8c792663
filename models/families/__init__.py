"""Model families: prompts with tools, the think boundary, the splice and action parsing."""

from nudgeability.models.families.action import ACTION_KINDS, OTHER, SELF, TOOL, TRUNC, Action
from nudgeability.models.families.base import Family
from nudgeability.models.families.detect import FAMILIES, KNOWN_FAMILIES, detect_family, get_family
from nudgeability.models.families.messages import FamilyError

__all__ = [
    "ACTION_KINDS",
    "Action",
    "FAMILIES",
    "Family",
    "FamilyError",
    "KNOWN_FAMILIES",
    "OTHER",
    "SELF",
    "TOOL",
    "TRUNC",
    "detect_family",
    "get_family",
]
