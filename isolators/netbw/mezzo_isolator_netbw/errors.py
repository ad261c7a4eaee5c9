"""The isolator's own error."""

from mezzo.errors import MezzoError


class NetworkSetupError(MezzoError):
    """A container's network could not be set up; the message names the step and why.
    Raised from ``prepare``, it fails the launch with that message."""
