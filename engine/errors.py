"""Typed errors of the engine."""


class EngineInputError(ValueError):
    """A request the engine cannot run as given; the message says what is wrong."""


class UnsupportedModelError(ValueError):
    """A model whose architecture the engine cannot run; the message says which feature."""
