"""The figures of `nudge report`, PNG and PDF: experiments.py (S vs L, flip composition,
delegation rates, oracle), delegation.py (delegation value), grounding.py (grounded nudges)."""
