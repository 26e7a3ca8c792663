"""The tables of `nudge stats`, rendered to text."""
