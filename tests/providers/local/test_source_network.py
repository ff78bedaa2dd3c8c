"""Where source.git may fetch from: a manifest's repo URL never reaches this machine's
loopback, link-local or unspecified addresses (a port scan and fingerprint of the
host's services), a private address only when the operator's `sourceHosts` names the
host, never an address of `sourceDenyNetworks`; the addresses checked are the ones git
connects to (pinned, no redirect followed); and every failure of the network says the
same generic line, so that a Job's message is no oracle. Real supervisors, real
bubblewrap and slirp4netns, real listeners, a test Git host in a network namespace."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.providers.local import fetch_addresses as addresses
from nodus_gitops.providers.local import source
from nodus_gitops.providers.local.config import LocalConfig
from nodus_gitops.providers.local.settings import resolve
from nodus_gitops.providers.local.spec import GitSource

from tests.providers.local.conftest import HAS_BWRAP, local_config

pytest_plugins = ["tests.providers.local.https_git"]
HAS_SLIRP = shutil.which("slirp4netns") is not None
bwrap_only = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
SANDBOXES = [pytest.param("bubblewrap", marks=bwrap_only), "none"]
# What git, curl or a service says about a port: none of it may reach a Job's message.
TELLTALES = ("gnutls", "tls", "ssl", "handshake", "connect", "http", "timed out", "timeout",
             "refused:", "reset", "packet", "certificate", "5432", "postgres", "resolve")
REFUSED_AT_ONCE = 10.0  # seconds from create to Failed, the supervisor's start included
MANY_AT_ONCE = 30.0  # a dozen of them, their supervisors starting together


def generic(url: str) -> str:
    return f"cannot fetch {url}: unreachable or refused"


def supervisor_log(local, k) -> str:
    path = local.run(k).path / "supervisor.log"
    return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def silent_listener(host: str = "127.0.0.1") -> Iterator[tuple[int, socket.socket]]:
    """Accepts connections (the kernel does) and never says a word."""
    with socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else
                              socket.AF_INET, backlog=64) as server:
        yield server.getsockname()[1], server


def waiting(server: socket.socket) -> bool:
    """Whether a connection is waiting to be accepted on `server`."""
    server.setblocking(False)
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


class _Plain(BaseHTTPRequestHandler):
    seen = 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@contextmanager
def plain_http() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def _resolvable(name: str) -> bool:
    try:
        socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
        return True
    except OSError:
        return False


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_hosts_loopback_and_link_local_are_never_fetched_from(local_factory, sandbox):
    """The attack: a manifest's repo at the host's own services. Each one fails at once,
    with the same line whatever listens there (PostgreSQL, nothing, plain HTTP, a
    listener that never answers), and no connection reaches any of them."""
    local = local_factory(sandbox=sandbox)
    with silent_listener() as (silent, server), plain_http() as http, \
            silent_listener("::1") as (silent6, server6):
        closed = closed_port()
        urls = ["https://127.0.0.1:5432/a/b", f"https://127.0.0.1:{closed}/a/b",
                f"https://127.0.0.1:{http}/a/b", f"https://127.0.0.1:{silent}/a/b",
                f"https://localhost:{silent}/a/b", f"https://0.0.0.0:{silent}/a/b",
                f"https://2130706433:{silent}/a/b",  # 127.0.0.1 as one number
                f"https://127.1.2.3:{silent}/a/b", "https://169.254.169.254/latest/meta-data",
                f"https://169.254.169.254:{silent}/a/b"]
        if _resolvable("ip6-localhost"):
            urls.append(f"https://ip6-localhost:{silent6}/a/b")
        if _resolvable("127.0.0.1.nip.io"):
            urls.append(f"https://127.0.0.1.nip.io:{silent}/a/b")
        started = time.monotonic()
        keys = [local.create(f"probe-{n}", command=["true"],
                             source={"git": {"repo": url, "ref": "main"}})
                for n, url in enumerate(urls)]
        done = [local.wait(k, timeout=MANY_AT_ONCE) for k in keys]
        took = time.monotonic() - started
        assert not waiting(server) and not waiting(server6)
        assert _Plain.seen == 0
    assert took < MANY_AT_ONCE, took
    for url, k, failed in zip(urls, keys, done, strict=True):
        assert (failed.phase, failed.reason) == ("Failed", "StorageUnavailable"), failed
        assert failed.message == generic(url), failed.message
        said = failed.message.removeprefix("cannot fetch ").replace(url, "")
        assert not [w for w in TELLTALES if w in said.lower()], said
        assert "sourceHosts" in failed.fix
        assert failed.status["attempts"] == 0 and not local.run(k).source.exists()
    # the detail is the reconciler's own: the supervisor's log says what was refused
    assert "127.0.0.1 is a loopback address" in supervisor_log(local, keys[0])
    assert "169.254.169.254 is a link-local address" in supervisor_log(local, keys[8])


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_ipv6_literals_are_refused_before_anything_is_reached(local_factory, sandbox):
    """https://[::1]:PORT and https://[::ffff:127.0.0.1]:PORT are no repository URL the
    schema or the backend takes: refused alike whether the port listens or not."""
    local = local_factory(sandbox=sandbox)
    with silent_listener("::1") as (silent, server):
        closed = closed_port()
        urls = [f"https://[::1]:{silent}/a/b", f"https://[::1]:{closed}/a/b",
                f"https://[::ffff:127.0.0.1]:{silent}/a/b",
                f"https://[::ffff:127.0.0.1]:{closed}/a/b"]
        keys = [local.create(f"v6-{n}", command=["true"],
                             source={"git": {"repo": url, "ref": "main"}})
                for n, url in enumerate(urls)]
        done = [local.wait(k, timeout=MANY_AT_ONCE) for k in keys]
        assert not waiting(server)
    shapes = set()
    for url, failed in zip(urls, done, strict=True):
        assert (failed.phase, failed.reason) == ("Failed", "StorageUnavailable"), failed
        shapes.add(failed.message.replace(url, "URL"))
    assert len(shapes) == 1, shapes
    # and were one to resolve, the addresses themselves are refused
    rules = addresses.AddressRules()
    for address in ("::1", "::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "::"):
        assert addresses.refusal(ipaddress.ip_address(address), "h", rules), address


@bwrap_only
def test_a_silent_server_never_holds_a_job_in_provisioning(local_factory):
    """A listener that accepts and says nothing held the Job in Provisioning for the
    fetch's 300 s: on the loopback it is refused before any connection."""
    local = local_factory()
    with silent_listener() as (port, server):
        url = f"https://127.0.0.1:{port}/a/b"
        started = time.monotonic()
        k = local.create("silent", command=["true"], source={"git": {"repo": url}})
        failed = local.wait(k, timeout=REFUSED_AT_ONCE)
        took = time.monotonic() - started
        assert not waiting(server)
    assert failed.message == generic(url) and took < REFUSED_AT_ONCE, (failed, took)


def test_a_refused_address_is_refused_before_git_starts(tmp_path):
    """The check is the reconciler's own, before any process starts (no git at all)."""
    sb, _ = local_sandbox(tmp_path, sandbox="none")
    started = time.perf_counter()
    with pytest.raises(source.SourceUnreachable) as refused:
        source.fetch(GitSource("https://127.0.0.1:5432/a/b", "main"), tmp_path / "out", sb,
                     git=None)
    took = time.perf_counter() - started
    assert str(refused.value) == generic("https://127.0.0.1:5432/a/b")
    assert "127.0.0.1 is a loopback address" in refused.value.detail
    assert took < 0.5, took
    assert not (tmp_path / "out").exists()


@bwrap_only
def test_a_private_host_is_fetched_from_only_when_source_hosts_names_it(local_factory,
                                                                       https_git, tmp_path):
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    url = https_git.url_for("code")
    unnamed = local_factory(git_ca_bundle=str(https_git.ca))
    k = unnamed.create("unnamed", command=["true"], source={"git": {"repo": url}})
    failed = unnamed.wait(k)
    assert (failed.phase, failed.message) == ("Failed", generic(url)), failed
    assert f"{https_git.host} is a private address" in supervisor_log(unnamed, k)
    assert https_git.connections == 0
    other = local_factory(**https_git.trusted(source_hosts=("git.corp.example",)))
    k = other.create("other", command=["true"], source={"git": {"repo": url}})
    assert other.wait(k).message == generic(url)
    assert https_git.connections == 0
    named = local_factory(**https_git.trusted())
    k = named.create("named", command=["cat", "a.txt"], source={"git": {"repo": url}})
    done = named.wait(k)
    assert done.phase == "Succeeded" and named.log(k) == "a", (done, named.log(k))
    assert https_git.connections > 0


@bwrap_only
@pytest.mark.parametrize("deny", ["network", "address"])
def test_a_denied_network_is_refused_even_when_source_hosts_names_it(local_factory,
                                                                     https_git, test_host,
                                                                     tmp_path, deny):
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    url = https_git.url_for("code")
    denied = test_host.network if deny == "network" else f"{https_git.host}/32"
    local = local_factory(**https_git.trusted(source_deny_networks=(denied, "fd00::/8")))
    k = local.create("denied", command=["true"], source={"git": {"repo": url}})
    failed = local.wait(k)
    assert (failed.phase, failed.message) == ("Failed", generic(url)), failed
    assert "sourceDenyNetworks" in supervisor_log(local, k)
    assert https_git.connections == 0


@pytest.mark.parametrize(("sandbox", "network", "client"), [
    pytest.param("bubblewrap", "shared", "slirp4netns", marks=bwrap_only),
    pytest.param("bubblewrap", "none", "slirp4netns", marks=bwrap_only),
    pytest.param("bubblewrap", "host", "slirp4netns", marks=bwrap_only),
    ("none", "host", "git-remote-http")])
def test_a_contained_fetch_goes_out_through_slirp4netns_whatever_the_jobs_network(
        local_factory, https_git, tmp_path, sandbox, network, client):
    """Contained, the fetch has a network namespace of its own: its connections are
    slirp4netns', made on the host (with --disable-host-loopback), never git's own;
    without a sandbox git connects from the host's network itself."""
    if sandbox == "bubblewrap" and not HAS_SLIRP:
        pytest.skip("slirp4netns is not installed")
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    local = local_factory(**https_git.trusted(sandbox=sandbox, network=network))
    k = local.create("fetched", command=["true"],
                     source={"git": {"repo": https_git.url_for("code")}})
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert https_git.clients and all((c or "").startswith(client) for c in https_git.clients), \
        https_git.clients


class _Redirect(BaseHTTPRequestHandler):
    to = ""
    seen = 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen += 1
        self.send_response(301)
        self.send_header("Location", self.to + self.path.lstrip("/"))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@bwrap_only
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_redirect_is_not_followed(local_factory, https_git, test_host, tmp_path, sandbox):
    """A renamed repository's redirect (or one to anywhere else) ends the fetch: what
    was checked is where git went."""
    from tests.providers.local.https_git import serve

    https_git.repo("real", {"a.txt": "a"}, tmp_path / "w")
    _Redirect.to = https_git.url_for("real").removesuffix("real.git")
    redirector = test_host.listening(
        lambda: ThreadingHTTPServer((test_host.address, 0), _Redirect))
    thread = serve(redirector, https_git.ca, https_git.ca.with_name("key.pem"))
    try:
        url = f"https://{test_host.address}:{redirector.server_address[1]}/real.git"
        local = local_factory(**https_git.trusted(sandbox=sandbox))
        k = local.create("moved", command=["true"], source={"git": {"repo": url}})
        failed = local.wait(k, timeout=60)
    finally:
        redirector.shutdown()
        redirector.server_close()
        thread.join(timeout=5)
    assert _Redirect.seen > 0
    assert (failed.phase, failed.message) == ("Failed", generic(url)), failed
    assert https_git.server.requests == 0  # the redirect's target was never asked


def children(before: dict[str, str] | None = None) -> dict[str, str]:
    """This process's child processes (pid: name), less those in `before` (what earlier
    tests of the session keep running: a pre-started supervisor, a server)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                found[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
    return {pid: name for pid, name in found.items() if pid not in (before or {})}


def local_sandbox(tmp_path: Path, **changes):
    """The resolved sandbox and settings of a local backend over tmp_path/root."""
    from nodus_gitops.providers.local.sandbox import Sandbox

    (tmp_path / "root").mkdir(exist_ok=True)
    resolved = resolve(local_config(disk_limit="polled", **changes), tmp_path / "root")
    return Sandbox.from_dict(resolved["sandbox"]), resolved


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_git_connects_to_the_addresses_checked_never_resolving_again(https_git, tmp_path,
                                                                     sandbox):
    """The name is resolved once, by the reconciler; git is pinned to what was checked
    (http.curloptResolve), so no second resolution (DNS rebinding) leads elsewhere.
    The test's resolver alone knows git.test.example: git never asks another."""
    from tests.providers.local.https_git import NAME

    https_git.repo("pinned", {"a.txt": "a"}, tmp_path / "w")
    sb, resolved = local_sandbox(tmp_path, sandbox=sandbox)
    url = f"https://{NAME}:{https_git.port}/pinned.git"
    asked: list[str] = []

    def resolver(address: str):
        def getaddrinfo(host, port, *args, **kwargs):
            asked.append(host)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return getaddrinfo

    git = shutil.which("git")
    slirp = resolved["helpers"]["slirp4netns"] if sb.contained else None
    rules = addresses.AddressRules.of([NAME])
    before = children()
    status, _ = source.fetch(GitSource(url, "main"), tmp_path / "out", sb, git,
                             str(https_git.ca), rules=rules, slirp=slirp,
                             getaddrinfo=resolver(https_git.host))
    assert (tmp_path / "out" / "a.txt").read_text() == "a" and status["commit"]
    assert asked == [NAME]
    assert not children(before), children(before)  # its slirp4netns was reaped with it
    seen = https_git.connections
    for n, address in enumerate(("127.0.0.1", "::1", "::ffff:127.0.0.1", "0.0.0.0",
                                 "169.254.169.254", "fe80::1")):
        with pytest.raises(source.SourceUnreachable):  # the same name, now the host's own
            source.fetch(GitSource(url, "main"), tmp_path / f"out-{n}", sb, git,
                         str(https_git.ca), rules=rules, slirp=slirp,
                         getaddrinfo=resolver(address))
    unnamed = addresses.AddressRules.of([])
    with pytest.raises(source.SourceUnreachable):  # a private address, its name unlisted
        source.fetch(GitSource(url, "main"), tmp_path / "out3", sb, git, str(https_git.ca),
                     rules=unnamed, slirp=slirp, getaddrinfo=resolver(https_git.host))
    assert https_git.connections == seen


@bwrap_only
def test_a_slirp4netns_that_fails_never_lets_the_fetch_out_another_way(https_git, tmp_path):
    """Its network not up, a contained fetch never starts git (bubblewrap waits on its
    --block-fd, which we hold): it fails SandboxUnavailable's way, at once, with no
    connection made, and nothing is left running."""
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    sb, _ = local_sandbox(tmp_path)
    before = children()
    started = time.monotonic()
    with pytest.raises(source.FetchNetworkUnavailable, match="slirp4netns"):
        source.fetch(GitSource(https_git.url_for("code"), "main"), tmp_path / "out", sb,
                     shutil.which("git"), str(https_git.ca),
                     rules=addresses.AddressRules.of([https_git.host]), slirp="/bin/false")
    assert time.monotonic() - started < REFUSED_AT_ONCE
    assert https_git.connections == 0 and not children(before)
    assert not (tmp_path / "out").exists()


# Addresses: any IPv4 or IPv6, the IPv4 ones also written inside IPv6 (mapped,
# compatible, NAT64), with the ranges that matter drawn often.
_V4 = st.one_of(st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
                st.sampled_from(["127.0.0.0/8", "169.254.0.0/16", "10.0.0.0/8", "100.64.0.0/10",
                                 "172.16.0.0/12", "192.168.0.0/16", "0.0.0.0/8", "224.0.0.0/4",
                                 "240.0.0.0/4"]).flatmap(
                    lambda n: st.integers(0, ipaddress.ip_network(n).num_addresses - 1).map(
                        lambda i, n=n: ipaddress.ip_network(n)[i])))
_V6_NETS = ["::/120", "fe80::/10", "fc00::/7", "ff00::/8", "2000::/3", "fec0::/10"]
_V6 = st.one_of(st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address),
                st.sampled_from(_V6_NETS).flatmap(
                    lambda n: st.integers(0, min(ipaddress.ip_network(n).num_addresses - 1,
                                                 2**64)).map(
                        lambda i, n=n: ipaddress.ip_network(n)[i])),
                _V4.map(lambda a: ipaddress.IPv6Address(f"::ffff:{a}")),
                _V4.map(lambda a: ipaddress.IPv6Address(int(a))),
                _V4.map(lambda a: ipaddress.IPv6Address(f"64:ff9b::{a}")))
ADDRESSES = st.one_of(_V4, _V6)
_NETS = ADDRESSES.flatmap(lambda a: st.integers(0 if a.version == 4 else 0,
                                                a.max_prefixlen).map(
    lambda p, a=a: ipaddress.ip_network(f"{a}/{p}", strict=False)))


def _ipv4_of(a):
    """The IPv4 address an IPv6 one writes, where it writes one."""
    if a.version == 4:
        return a
    if a.ipv4_mapped:
        return a.ipv4_mapped
    if int(a) >> 32 == 0 and int(a) > 1:
        return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
    if a in ipaddress.ip_network("64:ff9b::/96"):
        return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
    return None


@settings(max_examples=3000, deadline=None)
@given(address=ADDRESSES, named=st.booleans(), other=st.lists(st.sampled_from(
    ["git.corp.example", "10.1.2.3", "localhost", "127.0.0.1", "::1"]), max_size=3),
    deny=st.lists(_NETS, max_size=3))
def test_the_address_rule(address, named, other, deny) -> None:
    """Nothing loopback, link-local, unspecified or multicast is ever allowed, whatever
    the lists say; a private address only with its host in sourceHosts; a denied one
    never; a global one is allowed unless denied."""
    host = "git.corp.example" if named else "host.example"
    hosts = [*other, *(["git.corp.example"] if named else [])]
    rules = addresses.AddressRules.of(hosts, [str(n) for n in deny])
    why = addresses.refusal(address, host, rules)
    same = [a for a in (address, _ipv4_of(address)) if a is not None]
    if any(a.is_loopback or a.is_link_local or a.is_unspecified or a.is_multicast
           or (a.version == 4 and a in ipaddress.ip_network("0.0.0.0/8")) for a in same):
        assert why is not None
    if any(a in n for a in same for n in deny if a.version == n.version):
        assert why is not None and "sourceDenyNetworks" in why
    if why is None and not all(a.is_global for a in same):
        assert named
    if all(a.is_global and not a.is_reserved and not a.is_multicast
           and not (a.version == 6 and a.is_site_local) for a in same[-1:]) \
            and not any(a in n for a in same for n in deny if a.version == n.version):
        assert why is None, why
    # the host as written counts: the same address reached through a name or the
    # address written as itself in the URL
    if why is not None and "private" in why:
        assert addresses.refusal(address, host, addresses.AddressRules.of([*hosts, host])) is None


@pytest.mark.parametrize("address", ["100.64.0.1", "100.127.255.254", "10.0.0.1", "172.31.0.1",
                                     "192.168.1.1", "fd12::1", "fec0::1", "::ffff:10.0.0.1",
                                     "192.0.2.2", "198.18.0.1"])
def test_private_and_shared_ranges_need_source_hosts(address) -> None:
    """CGNAT's 100.64/10 is not is_private in every Python: it is private here."""
    addr = ipaddress.ip_address(address)
    assert "private" in addresses.refusal(addr, "h", addresses.AddressRules())
    assert addresses.refusal(addr, "h", addresses.AddressRules.of(["H."])) is None


def test_the_settings_are_checked_when_the_backend_starts() -> None:
    assert LocalConfig(source_hosts=["Git.Corp.Example.", "10.1.2.3"]).source_hosts == (
        "git.corp.example", "10.1.2.3")
    assert LocalConfig(source_deny_networks=["10.1.2.3/8"]).source_deny_networks == (
        "10.0.0.0/8",)
    for bad, words in (({"source_hosts": ["127.0.0.1"]}, "never fetches from"),
                       ({"source_hosts": ["169.254.169.254"]}, "never fetches from"),
                       ({"source_hosts": "git.corp.example"}, "a list"),
                       ({"source_hosts": [""]}, "a list"),
                       ({"source_deny_networks": ["10.0.0.0/33"]}, "sourceDenyNetworks"),
                       ({"source_deny_networks": "10.0.0.0/8"}, "a list")):
        with pytest.raises(ValueError, match=words):
            LocalConfig(**bad)


def test_the_settings_reach_the_supervisor(tmp_path) -> None:
    _, resolved = local_sandbox(tmp_path, sandbox="none", source_hosts=("git.corp.example",),
                                source_deny_networks=("10.9.0.0/16",))
    assert json.loads(json.dumps(resolved))["sourceHosts"] == ["git.corp.example"]
    assert resolved["sourceDenyNetworks"] == ["10.9.0.0/16"]
    rules = addresses.AddressRules.of(resolved["sourceHosts"], resolved["sourceDenyNetworks"])
    assert addresses.refusal(ipaddress.ip_address("10.9.1.1"), "git.corp.example", rules)
    assert addresses.refusal(ipaddress.ip_address("10.8.1.1"), "git.corp.example", rules) is None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_the_config_file_names_the_source_lists_as_the_readme_does():
    """`sourceHosts` and `sourceDenyNetworks` under a local provider in the YAML config."""
    from nodus_gitops.floor.errors import ConfigError
    from nodus_gitops.providers.local.build import local_config as from_settings

    config = from_settings("local", {"sourceHosts": ["git.corp.example", "10.1.2.3"],
                                     "sourceDenyNetworks": ["10.9.0.0/16"]})
    assert config.source_hosts == ("git.corp.example", "10.1.2.3")
    assert config.source_deny_networks == ("10.9.0.0/16",)
    with pytest.raises(ConfigError, match="sourceDenyNetwork"):
        from_settings("local", {"sourceDenyNetwork": ["10.9.0.0/16"]})  # a typo is named
