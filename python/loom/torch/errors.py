"""The errors loom.torch raises."""


class CaptureError(ValueError):
    """A model, parallel program or optimizer loom.torch cannot capture or lower,
    with the reason and, where there is one, the place in the user's code."""
