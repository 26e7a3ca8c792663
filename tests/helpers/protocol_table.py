"""The protocol's table of conditions (splice/README.md, "Conditions"), written out by hand once:
the independent reference the condition vocabulary and a run's records are checked against."""

from __future__ import annotations

# code -> (kind, side, voice, seal, oracle, base), in the canonical record order (side: the
# polarity of the inserted sentence, "0" for the neutral one)
PROTOCOL = {
    "NT": ("base", None, None, False, False, None),
    "B": ("base", None, None, False, False, None),
    "empty": ("arm", None, None, False, False, "B"),
    "conf": ("arm", "+", "first", False, False, "B"),
    "doubt": ("arm", "-", "first", False, False, "B"),
    "neutral": ("arm", "0", None, False, False, "B"),
    "conf_second": ("arm", "+", "second", False, False, "B"),
    "doubt_second": ("arm", "-", "second", False, False, "B"),
    "conf_reviewer": ("arm", "+", "reviewer", False, False, "B"),
    "doubt_reviewer": ("arm", "-", "reviewer", False, False, "B"),
    "conf_expert": ("arm", "+", "expert", False, False, "B"),
    "doubt_expert": ("arm", "-", "expert", False, False, "B"),
    "sealed_conf": ("arm", "+", "first", True, False, "B"),
    "sealed_doubt": ("arm", "-", "first", True, False, "B"),
    "oracle_B": ("base", None, None, False, True, None),
    "oracle_conf": ("arm", "+", "first", False, True, "oracle_B"),
    "oracle_doubt": ("arm", "-", "first", False, True, "oracle_B"),
}
ORDER = tuple(PROTOCOL)
BASES = tuple(code for code, row in PROTOCOL.items() if row[0] == "base")
B_ARMS = tuple(code for code, row in PROTOCOL.items() if row[5] == "B")
ORACLE_ARMS = tuple(code for code, row in PROTOCOL.items() if row[5] == "oracle_B")

# condition -> the id of its sentence in the sentences file (None: nothing is inserted); the
# sealed and oracle arms reuse the primary first-person sentences
SENTENCE_IDS = {
    "NT": None,
    "B": None,
    "empty": None,
    "oracle_B": None,
    "conf": "first.confidence",
    "doubt": "first.doubt",
    "neutral": "neutral",
    "conf_second": "second.confidence",
    "doubt_second": "second.doubt",
    "conf_reviewer": "reviewer.confidence",
    "doubt_reviewer": "reviewer.doubt",
    "conf_expert": "expert.confidence",
    "doubt_expert": "expert.doubt",
    "sealed_conf": "first.confidence",
    "sealed_doubt": "first.doubt",
    "oracle_conf": "first.confidence",
    "oracle_doubt": "first.doubt",
}
