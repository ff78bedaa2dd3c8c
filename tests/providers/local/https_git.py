"""Git over HTTPS for source.git tests, on a test host that is not this machine's
loopback: the smart-HTTP server of tests/fixtures_git.py behind TLS, with a self-signed
certificate made by openssl.

The test host is a network namespace the fixture makes (`ip netns add`, a veth pair on
a 10.x /30 that no address or route of this machine covers, the listening socket
made inside the namespace), removed when the test ends, failed or not. Where no
namespace can be made (not root, no iproute2) it is this machine's own first
non-loopback address. Either address is private, so the backend fetches from it only
when the local backend's `sourceHosts` names it (`HttpsGit.trusted()`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import os
import socketserver
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_git import _GitHttpHandler, _Server, git
from tests.providers.local.test_network import host_address

IP = "/usr/sbin/ip"
NAME = "git.test.example"  # also in the certificate: a name only a test's resolver knows
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)
_made = itertools.count()


@dataclass
class TestHost:
    """Where the test's servers listen: `address`, in the namespace `netns` (None: this
    machine's own address)."""

    __test__ = False  # not a test class
    address: str
    netns: str | None
    network: str  # the address's network, as sourceDenyNetworks would name it

    def listening(self, make: Callable[[], socketserver.TCPServer]) -> socketserver.TCPServer:
        """`make()` (a server binding `address`) with its socket in the test host's
        namespace: made on a thread of its own that entered it (a socket stays in the
        namespace it was made in)."""
        if self.netns is None:
            return make()
        made: list[Any] = []

        def inside() -> None:
            try:
                fd = os.open(f"/run/netns/{self.netns}", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
                made.append(make())
            except BaseException as exc:  # handed to the caller
                made.append(exc)

        thread = threading.Thread(target=inside)
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True, timeout=30)


def _taken() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine's addresses and routes cover."""
    taken = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        out = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30).stdout
        for word in out.split():
            with contextlib.suppress(ValueError):
                if word[0].isdigit():
                    taken.append(ipaddress.ip_network(word, strict=False))
    return [n for n in taken if n.version == 4 and n.prefixlen > 0]


def _free_subnet() -> ipaddress.IPv4Network:
    taken = _taken()
    start = (os.getpid() * 7 + next(_made)) % 16000
    for n in range(16000):
        i = (start + n) % 16000
        net = ipaddress.ip_network(f"10.{200 + i // 4000 % 50}.{i // 16 % 250}.{i % 16 * 4}/30")
        if net.subnet_of(ipaddress.ip_network("10.0.2.0/24")):  # slirp4netns' own
            continue
        if not any(net.overlaps(t) for t in taken):
            return net
    raise OSError("no free 10.x /30 for a test host")


@contextlib.contextmanager
def namespace_host() -> Iterator[TestHost]:
    """A test host in a network namespace of its own, joined to this one by a veth
    pair; removed on the way out, whatever happened."""
    n = next(_made)
    name = f"nodus-src-{os.getpid()}-{n}"
    outer = f"nsrc{os.getpid() % 100000}x{n}"[:15]
    net = _free_subnet()
    here, there = (str(a) for a in list(net.hosts())[:2])
    try:
        _ip("netns", "add", name)
        _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("addr", "add", f"{here}/30", "dev", outer)
        _ip("link", "set", outer, "up")
        _ip("-n", name, "addr", "add", f"{there}/30", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield TestHost(there, name, str(net))
    finally:
        subprocess.run([IP, "netns", "del", name], capture_output=True, timeout=30)
        subprocess.run([IP, "link", "del", outer], capture_output=True, timeout=30)


@pytest.fixture
def test_host() -> Iterator[TestHost]:
    try:
        with namespace_host() as host:
            yield host
            return
    except (OSError, subprocess.SubprocessError):
        pass  # no namespace here: this machine's own address, below
    address = host_address()
    if address is None:
        pytest.skip("no network namespace can be made here and this machine has no "
                    "address but a loopback one")
    yield TestHost(address, None, f"{address}/32")


def _hex_address(address: str, port: int) -> str:
    """An IPv4 address and port as /proc/net/tcp writes them."""
    return f"{int.from_bytes(ipaddress.IPv4Address(address).packed, 'little'):08X}:{port:04X}"


def holder(client: tuple[str, int], server: tuple[str, int]) -> str | None:
    """The name of the process of this network namespace holding the client's end of a
    TCP connection (None: not found, or not IPv4)."""
    try:
        ours, theirs = _hex_address(*client[:2]), _hex_address(*server[:2])
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except (OSError, ValueError):
        return None
    inode = next((f.split()[9] for f in lines
                  if f.split()[1:3] == [ours, theirs]), None)
    if inode is None:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                        return Path(f"/proc/{pid}/comm").read_text().strip()
    return None


class _HostServer(_Server):
    """tests/fixtures_git.py's server on the test host's address, counting the
    connections it was offered (a TLS handshake that fails is one too) and saying
    which program of this machine made each one it accepted (`clients`)."""

    def __init__(self, root: Path, address: str) -> None:
        ThreadingHTTPServer.__init__(self, (address, 0), _GitHttpHandler)
        self.root = root
        self.auth = None
        self.counting = threading.Lock()
        self.requests = 0
        self.busy_seconds = 0.0
        self.connections = 0
        self.clients: list[str | None] = []

    def get_request(self) -> tuple[Any, Any]:
        with self.counting:  # called when a connection waits
            self.connections += 1
        conn, client = super().get_request()
        self.clients.append(holder(client, self.server_address))  # the client still waits
        return conn, client


def certificate(where: Path, address: str) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for `address` and `NAME`."""
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={address}", "-addext",
                    f"subjectAltName=IP:{address},DNS:{NAME}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    cert.chmod(0o644)
    return cert, key


def serve(server: socketserver.TCPServer, cert: Path, key: Path) -> threading.Thread:
    """`server` behind TLS, served on a thread of its own."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    return thread


@dataclass
class HttpsGit:
    root: Path
    host: str  # the test host's address
    port: int
    ca: Path  # the certificate, which is its own CA
    server: _HostServer

    def url_for(self, name: str) -> str:
        return f"https://{self.host}:{self.port}/{name}.git"

    @property
    def connections(self) -> int:
        """Connections the server was offered so far."""
        return self.server.connections

    @property
    def clients(self) -> list[str | None]:
        """The program of this machine that made each connection accepted (slirp4netns
        for a fetch in a network of its own, git's https helper for one on the host's)."""
        return list(self.server.clients)

    def trusted(self, **changes: Any) -> dict[str, Any]:
        """The local backend's settings that fetch from this server: its CA trusted and
        its address in sourceHosts."""
        return {"git_ca_bundle": str(self.ca), "source_hosts": (self.host,), **changes}

    def repo(self, name: str, files: dict[str, str], work: Path) -> str:
        """A served repository with one commit of `files`; returns the commit id."""
        bare = self.root / f"{name}.git"
        git("init", "--quiet", "--bare", bare)
        git("init", "--quiet", "-b", "main", work)
        for path, text in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        git("add", "--all", cwd=work)
        git("commit", "--quiet", "-m", "files", cwd=work)
        git("push", "--quiet", str(bare), "HEAD:refs/heads/main", cwd=work)
        return git("rev-parse", "HEAD", cwd=work)


@pytest.fixture
def https_git(tmp_path: Path, test_host: TestHost) -> Iterator[HttpsGit]:
    tls = tmp_path / "tls"
    tls.mkdir()
    cert, key = certificate(tls, test_host.address)
    root = tmp_path / "https-srv"
    root.mkdir()
    server = test_host.listening(lambda: _HostServer(root, test_host.address))
    thread = serve(server, cert, key)
    try:
        yield HttpsGit(root, test_host.address, server.server_address[1], cert, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
