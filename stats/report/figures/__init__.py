"""The figures of `nudge report`, PNG and PDF."""
