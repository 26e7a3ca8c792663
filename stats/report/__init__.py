"""What `nudge stats` writes and `nudge report` draws, and the pipelines of both commands."""
