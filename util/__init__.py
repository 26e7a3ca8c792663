"""The bottom layer: what every other package uses and that imports none of them.

- `atomic`: the one write-to-a-temporary-then-rename helper (files and whole directories).
- `json_errors`: the one wording of a JSON syntax error in a message.
- `json_lines`: the one JSON-lines reader (run directories and the tasks' data files).
- `cache`: the cache root ($NUDGE_CACHE) of the SmolLM2 conversion and the manifest's file hashes.
- `progress`: progress bars that suit where stderr goes.
- `threads`: torch's CPU thread count, set once per process.
- `fallbacks`: every fallback from a fast path, warned once and recorded for the run manifest.
- `heap`: the C heap's freed pages kept for the next forward (`mallopt`) and handed back to the OS
  after a long one (`malloc_trim`).

Each needs only the standard library, but for tqdm (`progress`, imported when a bar is drawn) and
torch (`threads`); none imports another package of the project.
"""
