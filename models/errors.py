"""The one error of loading a model: what the user must fix, in one line."""


class ModelLoadError(ValueError):
    """A model spec that cannot be resolved or loaded; the message says what to fix."""
