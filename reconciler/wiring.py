"""The composition root: the one place that wires the layers together. It builds each
binding's sync from its parts (the Git source, the backend, the commit checks that report
on it) and the service that drives them; the CLI and the tests start from here."""

from __future__ import annotations

from functools import partial
from typing import Any

from nodus_gitops.backends import build_backend
from nodus_gitops.checks.poster import build_poster
from nodus_gitops.checks.reporter import CheckReporter
from nodus_gitops.config import Binding, Settings
from nodus_gitops.hosts.client import HostLimiter
from nodus_gitops.providers.base import Provider
from nodus_gitops.service import Service
from nodus_gitops.source import GitSource
from nodus_gitops.state.store import Store
from nodus_gitops.sync import BindingSync


def git_source(settings: Settings, binding: Binding) -> GitSource:
    """The binding's repository, mirrored under the state directory."""
    return GitSource(binding.url, binding.branch, settings.state_dir / "mirrors",
                     binding.credentials())


def build_sync(settings: Settings, store: Store, binding: Binding, provider: Provider, *,
               limiter: HostLimiter | None = None, **options: Any) -> BindingSync:
    """One binding's sync, with its checks posted where the settings say (writes to a
    host paced by `limiter`, shared by every binding of a service); records the binding
    in the store."""
    source = git_source(settings, binding)
    poster = build_poster(store, settings.checks, binding, source=source, limiter=limiter)
    reporter = CheckReporter(binding, settings.instance, poster, provider, store)
    store.upsert_binding(binding.id, binding.url, binding.branch, binding.path,
                         binding.project)
    return BindingSync(binding, store, provider, instance=settings.instance, source=source,
                       reporter=reporter, **options)


def build_service(settings: Settings, store: Store, **fields: Any) -> Service:
    """The long-running service over every binding of `settings` (fields as `Service`'s:
    provider_factory, leases, follow_up, ...)."""
    fields.setdefault("provider_factory", lambda name: build_backend(
        name, settings.provider_settings(name), settings.state_dir))
    limiter = HostLimiter()  # one per process: a host's rate limit counts every binding
    return Service(settings, store,
                   sync_factory=partial(build_sync, settings, store, limiter=limiter), **fields)
