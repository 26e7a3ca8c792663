"""Grounded nudges: the model's own uncertainty signals decide which sentence each problem gets.

signals.py: the signals as scores of competence (orientation, AUROC with its numba kernel and numpy
twin, ECE, cross-fitting); join.py: the signals read back from a run's records, aligned with a
table's rows; estimators.py: delegation accuracy of policies, the grounded arm, its sham and the
grounding lift, with intervals; summary.py: `ground(table, signals)`, everything for one
experiment. Definitions: stats/README.md.
"""
