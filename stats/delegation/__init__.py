"""Delegation value: what the sentences do to final accuracy once the tool's result is used."""
