"""Errors that the CLI turns into a one-line message and exit code 2."""


class EvalsuiteError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""

    exit_code = 2


class SpecError(EvalsuiteError):
    """A variant spec that does not parse."""


class StoreMismatch(EvalsuiteError):
    """A stored run/baseline that does not match what is being asked for."""
