"""What the SDK raises: every error is a `NodusError`, so one `except` catches them all.

Only setup mistakes, a missing Sweep, a timeout and refused credentials raise; a Sweep
whose cells failed is a result (`wait()` returns its report with phase `Failed`)."""

from __future__ import annotations

from collections.abc import Sequence


class NodusError(Exception):
    """The base of every SDK error."""


class Unsupported(NodusError, NotImplementedError):
    """The platform does not offer this yet, such as a Function or a recipe as a Sweep's
    target (the API serves Job templates)."""


class InvalidSweep(NodusError, ValueError):
    """The Sweep's manifest would not validate; `problems` lists every problem found."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        self.problems = list(problems)
        if self.problems:
            message = message + ":\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(message)


class NotFound(NodusError, LookupError):
    """No such Sweep: not in the API (after the grace the reconciler needs to notice a
    new commit), or not in Git for `suspend()`, `resume()` and `cancel()`."""


class Timeout(NodusError, TimeoutError):
    """`wait(timeout=...)` ran out before the Sweep finished."""


class AuthError(NodusError, PermissionError):
    """The API answered 401 or 403, or the Git remote refused the credentials."""


class ConfigError(NodusError):
    """The SDK is not set up for this call, such as a write without a repository URL."""


class ApiError(NodusError):
    """The JSON API could not be reached or answered something unexpected."""


class GitError(NodusError):
    """The manifests repository could not be fetched or pushed to."""


__all__ = ["ApiError", "AuthError", "ConfigError", "GitError", "InvalidSweep", "NodusError",
           "NotFound", "Timeout", "Unsupported"]
