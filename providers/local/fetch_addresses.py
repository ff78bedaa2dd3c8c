"""Where a `source.git` fetch may connect: the URL's host resolved once and every
address judged before anything connects (`refusal`). Loopback, link-local, unspecified
(0/8, ::), multicast and reserved addresses, and those written inside IPv6 (IPv4-mapped,
-compatible, NAT64), are always refused; one that is not global (RFC 1918, CGNAT's
100.64/10, fc00::/7, ...) only when the host, as the URL writes it, is in the backend's
`sourceHosts`; any address in `sourceDenyNetworks` never. The caller pins git to the
addresses this returns, so no second resolution (DNS rebinding) leads it elsewhere.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class AddressRefused(Exception):
    """No address of the URL's host may be connected to; the message says why, for the
    reconciler's log (never for the committer: it would map what listens where)."""


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., Sequence[tuple[Any, ...]]]  # socket.getaddrinfo's shape

# What ipaddress leaves out: 0/8 is "this network" (only 0.0.0.0 is_unspecified), and
# IPv4 written inside IPv6 other than as mapped (::ffff:a.b.c.d, `ipv4_mapped`).
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # ::a.b.c.d (deprecated; :: and ::1 aside)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix


def canonical_host(host: str) -> str:
    """A host name or address as sourceHosts and the URL compare it: lower case, no final
    dot, an address in its usual form."""
    host = host.strip().lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


@dataclass(frozen=True)
class AddressRules:
    """The operator's lists: `hosts` (sourceHosts, canonical) may be private addresses;
    no address in `deny` (sourceDenyNetworks) is ever fetched from."""

    hosts: frozenset[str] = frozenset()
    deny: tuple[Network, ...] = ()

    @classmethod
    def of(cls, hosts: Iterable[str] = (), deny: Iterable[str] = ()) -> AddressRules:
        return cls(frozenset(canonical_host(h) for h in hosts),
                   tuple(ipaddress.ip_network(n, strict=False) for n in deny))


def ipv4_inside(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, compatible, NAT64), if any."""
    if address.version == 4:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if (address in _COMPATIBLE and int(address) > 1) or address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def never(address: Address) -> str | None:
    """What `address` is when no list can allow it (None: a list may)."""
    for what, test in (("loopback", address.is_loopback), ("link-local", address.is_link_local),
                       ("multicast", address.is_multicast),
                       ("unspecified", address.is_unspecified or address in _THIS_NETWORK),
                       ("reserved", address.is_reserved)):
        if test:
            return what
    return None


def refusal(address: Address, host: str, rules: AddressRules) -> str | None:
    """Why source.git may not connect to `address` for a URL naming `host` (None: it
    may). An IPv4 address written inside IPv6 is judged as itself."""
    inner = ipv4_inside(address)
    judged = inner or address
    for net in rules.deny:
        if any(a.version == net.version and a in net for a in (address, judged)):
            return f"{address} is in sourceDenyNetworks ({net})"
    what = never(judged)
    if what is not None:
        return f"{address} is {'an' if what[0] in 'aeiou' else 'a'} {what} address"
    private = not judged.is_global or (judged.version == 6 and judged.is_site_local)
    if private and canonical_host(host) not in rules.hosts:
        return (f"{address} is a private address and {host} is not in the local backend's "
                "sourceHosts")
    return None


def checked_addresses(url: str, rules: AddressRules,
                      getaddrinfo: Resolver = socket.getaddrinfo) -> tuple[str, int, list[str]]:
    """(host, port, the addresses git may connect to) for `url`, resolved once;
    AddressRefused when none may be."""
    parts = urlsplit(url)
    try:
        host, port = parts.hostname or "", parts.port or 443
        found = getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        raise AddressRefused(f"{parts.netloc} does not resolve: {exc}") from None
    allowed: list[str] = []
    refused: list[str] = []
    for info in found:
        try:
            address = ipaddress.ip_address(str(info[4][0]).partition("%")[0])
        except ValueError:
            continue
        why = refusal(address, host, rules)
        if why:
            refused.append(why)
        elif str(address) not in allowed:
            allowed.append(str(address))
    if not allowed:
        raise AddressRefused("; ".join(dict.fromkeys(refused)) or f"{host} has no address")
    return host, port, allowed
