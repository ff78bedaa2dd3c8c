"""A provider wrapper that counts every call to a backend (requests, and errors by kind)
for /metrics."""

from __future__ import annotations

from typing import Any

from nodus_gitops.floor.errors import PermanentError, TransientError
from nodus_gitops.metrics import count_provider


class MeteredProvider:
    """A provider whose every call is counted (requests, and errors by kind)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.native_kinds = getattr(inner, "native_kinds", frozenset())

    def _call(self, operation: str, fn: Any, *args: Any) -> Any:
        try:
            result = fn(*args)
        except TransientError:
            count_provider(self.name, operation, "transient")
            raise
        except PermanentError:
            count_provider(self.name, operation, "permanent")
            raise
        count_provider(self.name, operation)
        return result

    def create(self, workload: Any, idempotency_key: str) -> Any:
        return self._call("create", self.inner.create, workload, idempotency_key)

    def patch(self, workload: Any, changes: Any) -> Any:
        return self._call("patch", self.inner.patch, workload, changes)

    def delete(self, key: Any) -> None:
        return self._call("delete", self.inner.delete, key)

    def get(self, key: Any) -> Any:
        return self._call("get", self.inner.get, key)

    def list_owned(self, project: str, instance: str) -> Any:
        return self._call("list", self.inner.list_owned, project, instance)

    def __getattr__(self, name: str) -> Any:  # estimate(), output_location(), ...
        return getattr(self.inner, name)
