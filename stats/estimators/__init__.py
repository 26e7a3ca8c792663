"""The estimators of one experiment and across experiments, as pure functions over int8 arrays.

sensitivity.py (S), targeting.py (WT, WTrand, L), mcnemar.py, diagnostics.py (Gamma, controls,
flip composition, Dself/Rself, oracle), contributions.py (each problem's counts of a +/- pair, and
S/WT/WTrand/L from any sums of them), intervals.py (the pair's bootstrap intervals, on
resampling/), profiles.py (the profile rule), summary.py (`summarize`: every estimate of an
experiment with its interval) and across.py (medians, Spearman rho, cohorts). Definitions:
stats/README.md.
"""
