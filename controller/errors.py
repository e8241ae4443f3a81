"""The one error type the controller raises: a message for the user, never a traceback.

Errors from the switch keep P4Runtime's wording (code and per-update message)."""
from __future__ import annotations


class ControllerError(Exception):
    """Bad input, or a request the switch refused; `str()` is the message to show."""


class SwitchUnavailable(ControllerError):
    """No P4Runtime server answered at the switch's address (not started yet, or gone)."""
