"""Where the server listens: a host's socket family and its address in URLs and targets.

`listening_socket(host, port)` binds a TCP socket with the family the host resolves to, so an
IPv6 --host (`::1`, `::`) binds as IPv6 (hunt 75: `socket.create_server` defaults to AF_INET
and refused them with "Address family for hostname not supported"); `::` (and `""`) also
accept IPv4 where the system allows dual-stack sockets, as uvicorn's `--host ::` does.
`netloc(host, port)` is `host:port`, an IPv6 address in brackets (RFC 3986; gRPC's target
syntax too): `[::1]:8000`.
"""

from __future__ import annotations

import socket

__all__ = ["listening_socket", "netloc"]


def netloc(host: str, port: int) -> str:
    """`host:port` for a URL or a gRPC target; an IPv6 address bracketed."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on host:port (0: a free port), of the family `host` resolves to
    first (`socket.getaddrinfo`). Raises OSError (`socket.gaierror` for a name that does not
    resolve) as `socket.create_server` does."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family = info[0][0]
    dualstack = family == socket.AF_INET6 and host in ("::", "") and socket.has_dualstack_ipv6()
    return socket.create_server(
        (host, port), family=family, backlog=backlog, dualstack_ipv6=dualstack
    )
