"""Helpers shared by the test suite (importable as `helpers.<module>`)."""
