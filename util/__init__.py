"""The bottom layer: what every other package uses and that imports none of them.

- `fallbacks`: every fallback from a fast path, warned once and recorded for the run manifest.
"""
