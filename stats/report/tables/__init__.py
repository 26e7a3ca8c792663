"""The tables of `nudge stats`: experiments.py (Table 1, medians, per-seed rows, controls and
diagnostics), delegation.py (delegation value), grounding.py (grounded nudges), position.py
(by position, runs with extra cuts). Each renders
summaries to text; report/document.py names the files."""
