"""Whether a gRPC address stays on this machine: where plaintext is acceptable.

The server listens in plaintext only on a loopback address (``server.app``), and a client sends a
credential over plaintext only to one (``client.channel``). Names are not resolved: only
``localhost``, a loopback IP literal (127.0.0.0/8, ::1) or a Unix socket counts; any other name
could resolve anywhere (or be made to).
"""

from __future__ import annotations

import ipaddress

LOCAL_SCHEMES = ("unix:", "unix-abstract:")


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback IP literal (brackets allowed around IPv6; an IPv4-mapped IPv6
    address counts as its IPv4 address)."""
    host = host.strip()
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def host_of(target: str) -> str:
    """The host of ``host:port`` or ``[v6]:port`` (a bare host is returned as it is)."""
    if target.startswith("["):
        return target[: target.find("]") + 1] if "]" in target else target
    if target.count(":") == 1:
        return target.rsplit(":", 1)[0]
    return target  # a bare IPv6 literal, or a host without a port


def is_loopback_address(address: str) -> bool:
    """Whether a gRPC target (``host:port``, ``dns:[//authority/]host:port``,
    ``ipv4:``/``ipv6:`` lists, ``unix:`` sockets) reaches only this machine."""
    target = address.strip()
    lowered = target.lower()
    if lowered.startswith(LOCAL_SCHEMES):
        return True
    if lowered.startswith("dns:"):
        target = target[4:]
        if target.startswith("//"):
            target = target[2:].split("/", 1)[1] if "/" in target[2:] else ""
    elif lowered.startswith(("ipv4:", "ipv6:")):
        targets = target[5:].split(",")
        return bool(targets) and all(is_loopback_host(host_of(t)) for t in targets)
    elif "://" in target or (":" in target and not _has_port_or_ip(target)):
        return False  # another scheme (vsock:, xds:, ...)
    return bool(target) and is_loopback_host(host_of(target))


def _has_port_or_ip(target: str) -> bool:
    """``target`` reads as ``host:port``, ``[v6]:port`` or an IP literal, not ``scheme:...``."""
    if target.startswith("["):
        return True
    _, _, tail = target.rpartition(":")
    if tail.isdigit():
        return True
    try:
        ipaddress.ip_address(target)
        return True
    except ValueError:
        return False


DEFAULT_PORT = 50051  # petlab-server serve's --port default (server.common.options)
DEFAULT_SERVER = f"127.0.0.1:{DEFAULT_PORT}"


def with_default_port(address: str, port: int = DEFAULT_PORT) -> str:
    """``address`` with petlab's default ``port`` when it names a host without one
    (``localhost`` is ``localhost:50051``, ``::1`` is ``[::1]:50051``): gRPC itself would take
    443, the HTTPS port, where no petlab server listens. Targets with a scheme (``unix:``,
    ``dns:``, ``ipv4:``, ...) and ``host:port`` are returned unchanged."""
    target = address.strip()
    if not target or "/" in target:
        return target  # empty (refused later), or a URI (dns:///host, unix:/path)
    if target.startswith("["):
        return target if "]:" in target else f"{target}:{port}"
    try:
        if ipaddress.ip_address(target).version == 6:
            return f"[{target}]:{port}"
        return f"{target}:{port}"
    except ValueError:
        pass
    if ":" in target:
        return target  # host:port, or scheme:rest
    return f"{target}:{port}"
