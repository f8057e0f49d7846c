"""One exception type for user mistakes.

Anything a user can get wrong (a parameter, a path, a malformed line) raises
:class:`UserError` (or a subclass) with a one-line message that names the
parameter or the file and line. The CLI prints it without a traceback and
exits with status 2; the dashboard shows it next to the widget.
"""


class UserError(ValueError):
    """A mistake in what the user asked for, explained in one line."""


class ConfigError(UserError):
    """A RunConfig field is invalid. ``param`` names the field."""

    def __init__(self, param: str, message: str):
        self.param = param
        self.reason = message   # the message without the field's name (argparse names the flag itself)
        super().__init__(f"{param}: {message}")


class DataError(UserError):
    """A dataset is unknown, missing or malformed (names file and line where known)."""
