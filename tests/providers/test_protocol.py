"""Every backend declares what it can do: the required `Provider` methods, and exactly
the optional capabilities it implements (no protocol stub inherited in place of a real
method); the two wrappers (metrics, workload controllers) have exactly the capabilities
of what they wrap, without `__getattr__`; the registry builds raw backends and
`build_backend` wraps them."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodus_gitops.backends import build_backend
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.metered import MeteredProvider
from nodus_gitops.providers import registry
from nodus_gitops.providers.base import (
    CAPABILITIES,
    DryRuns,
    Estimates,
    ExpiresFinished,
    FakeProvider,
    HasEvents,
    HasLogs,
    HasOutputs,
    HoldsBudgets,
    Provider,
    Suspends,
    capabilities_of,
)
from nodus_gitops.providers.local import LocalProvider
from nodus_gitops.providers.nodus import NodusProvider
from nodus_gitops.providers.slurm import SlurmConfig, SlurmProvider
from nodus_gitops.workloads import CompositeProvider

DECLARED = {
    LocalProvider: {Estimates, HasLogs, HasOutputs, HasEvents, Suspends, ExpiresFinished,
                    HoldsBudgets},
    SlurmProvider: {Estimates, HasLogs, HasOutputs, Suspends, ExpiresFinished, HoldsBudgets},
    NodusProvider: {Estimates, DryRuns, Suspends},
    FakeProvider: set(),
}


def backends(tmp_path: Path) -> dict[type, object]:
    return {
        LocalProvider: LocalProvider(tmp_path / "local"),
        SlurmProvider: SlurmProvider(SlurmConfig(root=tmp_path / "slurm", scontrol=None)),
        NodusProvider: NodusProvider.from_settings("nodus", {"url": "https://nodus.test"},
                                                   environ={"NODUS_API_KEY": "k"}),
        FakeProvider: FakeProvider(),
    }


@pytest.fixture
def made(tmp_path: Path):
    found = backends(tmp_path)
    yield found
    for provider in found.values():
        provider.close()


@pytest.mark.parametrize("cls", list(DECLARED), ids=lambda c: c.__name__)
def test_each_backend_has_exactly_the_capabilities_it_implements(made, cls) -> None:
    provider = made[cls]
    assert isinstance(provider, Provider)
    assert capabilities_of(provider) == DECLARED[cls]
    for capability in DECLARED[cls]:
        assert issubclass(cls, capability), f"{cls.__name__} does not declare {capability}"
        for method in _methods(capability):
            owner = next(k for k in cls.__mro__ if method in vars(k))
            assert owner not in CAPABILITIES, f"{cls.__name__}.{method} is the protocol's stub"


def _methods(protocol: type) -> list[str]:
    return [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize("cls", list(DECLARED), ids=lambda c: c.__name__)
def test_the_wrappers_keep_exactly_the_capabilities_of_what_they_wrap(made, cls,
                                                                     tmp_path) -> None:
    inner = made[cls]
    metered = MeteredProvider(inner)
    composite = CompositeProvider(inner, tmp_path / "workloads")
    both = MeteredProvider(composite)
    assert capabilities_of(metered) == DECLARED[cls]
    # the controllers' own: applying the TTLs of finished composites
    assert capabilities_of(composite) == DECLARED[cls] | {ExpiresFinished}
    assert capabilities_of(both) == DECLARED[cls] | {ExpiresFinished}
    for wrapper in (metered, composite, both):
        assert isinstance(wrapper, Provider)
        assert isinstance(wrapper, MeteredProvider | CompositeProvider)
        assert all("__getattr__" not in vars(k) for k in type(wrapper).__mro__)
        assert wrapper.name == inner.name


def test_a_forwarded_capability_reaches_the_backend_and_is_counted(tmp_path) -> None:
    from nodus_gitops.metrics import REGISTRY

    class Priced(FakeProvider, Estimates):
        def estimate(self, manifest: dict) -> str:
            return "2.50"

    def counted() -> float:
        return REGISTRY.get_sample_value("nodus_gitops_provider_requests_total",
                                         {"provider": "fake", "operation": "estimate"}) or 0.0

    before = counted()
    wrapped = MeteredProvider(CompositeProvider(Priced(), tmp_path / "w"))
    assert wrapped.estimate({"kind": "Job", "spec": {}}) == "2.50"
    assert counted() == before + 1
    assert not isinstance(MeteredProvider(FakeProvider()), Estimates)


def test_close_reaches_the_backend_through_both_wrappers(tmp_path) -> None:
    fake = FakeProvider()
    MeteredProvider(CompositeProvider(fake, tmp_path / "w")).close()
    assert fake.closed


def test_nodus_close_closes_its_http_client() -> None:
    provider = NodusProvider.from_settings("nodus", {"url": "https://nodus.test"},
                                           environ={"NODUS_API_KEY": "k"})
    provider.close()
    assert provider._client.is_closed


def test_the_registry_builds_raw_backends_and_build_backend_wraps_them(tmp_path) -> None:
    local = registry.build("local", {"type": "local"}, tmp_path)
    slurm = registry.build("hpc", {"type": "slurm", "scontrol": None}, tmp_path)
    assert type(local) is LocalProvider and local.root == (tmp_path / "local").resolve()
    assert type(slurm) is SlurmProvider and slurm.root == (tmp_path / "slurm").resolve()
    built = build_backend("local", {"type": "local", "root": str(tmp_path / "r")}, tmp_path)
    assert isinstance(built, CompositeProvider) and type(built.inner) is LocalProvider
    assert built.inner.root == (tmp_path / "r").resolve()
    for provider in (local, slurm, built):
        provider.close()
    with pytest.raises(ConfigError, match=r"providers\.x\.type: 'kube'"):
        registry.build("x", {"type": "kube"}, tmp_path)
    with pytest.raises(ConfigError, match=r"providers\.hpc: unknown setting 'tokn'"):
        registry.build("hpc", {"type": "slurm", "tokn": "a"}, tmp_path)


def test_a_backend_without_logs_says_so_where_logs_are_asked(tmp_path, capsys,
                                                             monkeypatch) -> None:
    from nodus_gitops.cli import main

    monkeypatch.setenv("NODUS_API_KEY", "k")
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  cloud:\n    type: nodus\n    url: https://nodus.test\n")
    code = main(["logs", "job/x", "--config", str(config), "--state-dir", str(tmp_path / "s")])
    assert code == 1
    err = capsys.readouterr().err
    assert "runs on the nodus backend, whose logs the reconciler cannot read" in err
    assert "Traceback" not in err
    code = main(["cp", "job/x:outputs/o", str(tmp_path / "d"), "--config", str(config),
                 "--state-dir", str(tmp_path / "s")])
    assert code == 1
    assert "whose outputs the reconciler cannot copy" in capsys.readouterr().err


def test_the_slurm_backend_reads_logs_of_its_job_directory(tmp_path) -> None:
    """Without a cluster: a Job's directory as the wrapper leaves it (submit.script
    sends the command's output to logs/<index>-<attempt>.log)."""
    import json

    provider = SlurmProvider(SlurmConfig(root=tmp_path, scontrol=None))
    key = ResourceKey("Job", "p", "j")
    jd = tmp_path / "p" / "j"
    (jd / "logs").mkdir(parents=True)
    (jd / "job.json").write_text(json.dumps({"key": str(key), "manifest": {
        "spec": {"completions": 2}}, "result": {"phase": "Succeeded"}}))
    (jd / "logs" / "1-0.log").write_text("first try\n")
    (jd / "logs" / "1-1.log").write_text("second try\nlast")
    assert list(provider.logs(key, 1)) == ["second try", "last"]
    assert list(provider.logs(key, 1, follow=True)) == ["second try", "last"]
    info = provider.log_info(key, 1)
    assert (info.indexes, info.attempts, info.phase) == (2, (0, 1), "Succeeded")
    from nodus_gitops.floor.errors import NotFoundError

    with pytest.raises(NotFoundError, match="has not run on this slurm backend"):
        list(provider.logs(ResourceKey("Job", "p", "other")))
    provider.close()
