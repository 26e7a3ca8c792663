"""The figures of `nudge report`, PNG and PDF: experiments.py (S vs L, flip composition,
delegation rates, oracle), delegation.py (delegation value), grounding.py (grounded nudges),
position.py (S, WT and L against the cut's relative position, runs with extra cuts)."""
