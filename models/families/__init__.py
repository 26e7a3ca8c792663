"""Model families: prompts with tools, the think boundary, the splice and action parsing.

action.py owns the action kinds, their OTHER/TRUNC reasons and the `Action` dataclass that
records store as they are; the finish reasons are the engine's (engine/sequence.py).

fam = get_family("qwen3", tokenizer)            # or detect_family(model_dir, tokenizer)
prompt = fam.render(messages, tools=tools)       # ids, generation prompt included
b = fam.find_boundary(generated)                 # first think-close, or None
arm_prefix = prompt + generated[:b] + fam.splice_ids(sentence, sealed=False)
action = fam.parse_action(generated[b:], finish_reason, tools=["retrieve"])
"""

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
