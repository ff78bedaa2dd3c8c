"""The one error tree: configuration, validation and provider errors.

Every error a user can cause is one of these, carries a message that names the file,
line or setting to change, and is turned into a single line and a non-zero exit at the
CLI boundary. Anything else is a bug.
"""

from __future__ import annotations

from collections.abc import Iterable


class NodusGitopsError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(NodusGitopsError):
    """A setting, flag or config file is wrong; the message names the setting."""


class ManifestError(NodusGitopsError):
    """A manifest file cannot be read as Nodus manifests (bad YAML, tags, too big)."""

    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file = file
        self.line = line
        self.message = message


class SourceError(NodusGitopsError):
    """The Git remote could not be reached, authenticated or read."""


class ProviderError(NodusGitopsError):
    """A compute backend refused or failed an operation."""


class TransientError(ProviderError):
    """Worth retrying later; `delay` is the backend's hint in seconds (Retry-After)."""

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(ProviderError):
    """Retrying the same request cannot succeed (invalid, forbidden, conflict)."""


class NotFoundError(PermanentError):
    """The backend has no resource under that name."""


def refuse_unknown_settings(settings: Iterable[str], known: Iterable[str], where: str) -> None:
    """ConfigError naming the first setting of `settings` that is not in `known` (a typo is
    the usual cause, so the message lists what `where` accepts, in `known`'s order)."""
    known = list(known)
    unknown = sorted(set(map(str, settings)) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(known)})")
