"""report.html: every table, figure and the provenance, with a problem browser."""
