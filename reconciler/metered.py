"""A provider wrapper that counts every call to a backend (requests, and errors by kind)
for /metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodus_gitops.floor.errors import PermanentError, TransientError
from nodus_gitops.metrics import count_provider
from nodus_gitops.providers.base import Provider, Wrapper


class MeteredProvider(Wrapper):
    """A provider whose every call is counted (requests, and errors by kind).

    A `Wrapper`: `MeteredProvider(inner)` has exactly `inner`'s optional capabilities
    (an `isinstance(m, HasLogs)` answers as for `inner`), and each forwarded capability
    call (estimate, logs, output_location, ...) is counted like the required ones."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.native_kinds = inner.native_kinds

    def _forward(self, operation: str, fn: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except TransientError:
            count_provider(self.name, operation, "transient")
            raise
        except PermanentError:
            count_provider(self.name, operation, "permanent")
            raise
        count_provider(self.name, operation)
        return result

    def create(self, workload: Any, idempotency_key: str) -> Any:
        return self._forward("create", self.inner.create, workload, idempotency_key)

    def patch(self, workload: Any, changes: Any) -> Any:
        return self._forward("patch", self.inner.patch, workload, changes)

    def delete(self, key: Any) -> None:
        return self._forward("delete", self.inner.delete, key)

    def get(self, key: Any) -> Any:
        return self._forward("get", self.inner.get, key)

    def list_owned(self, project: str, instance: str) -> Any:
        return self._forward("list", self.inner.list_owned, project, instance)

    def close(self) -> None:
        self.inner.close()
