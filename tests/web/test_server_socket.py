"""The dashboard's listening socket: asyncio turns Nagle's algorithm off only on sockets
made with IPPROTO_TCP, and without that every keep-alive response after the first waits
for the client's delayed ACK (about 40 ms a request)."""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor

from nodus_gitops.web.server import _bind


def test_connections_accepted_on_the_dashboards_socket_send_without_delay() -> None:
    async def accept_one() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listening = _bind("127.0.0.1:0")
        server = await asyncio.get_running_loop().create_server(Probe, sock=listening)
        async with server:
            host, port = listening.getsockname()[:2]
            _reader, writer = await asyncio.open_connection(host, port)
            nodelay = await asyncio.wait_for(seen, 10)
            writer.close()
        return nodelay

    # A loop of its own, on a thread of its own: the browser tests' sync API may run one
    # in this thread.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, accept_one()).result() != 0
