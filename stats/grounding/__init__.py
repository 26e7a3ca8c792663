"""Grounded nudges: the model's own uncertainty signals decide which sentence each problem gets."""
