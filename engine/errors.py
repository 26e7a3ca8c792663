"""Typed errors of the engine."""


class EngineInputError(ValueError):
    """A request the engine cannot run as given; the message says what is wrong."""
