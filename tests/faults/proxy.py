"""A TCP proxy in front of the broker that a fault test can cut and restore.

The broker advertises the proxy's port, so every client connection goes through it. ``cut()`` closes
every connection and stops listening (clients get "connection refused", as from a broker that went
away); ``restore()`` listens again. The broker keeps its data meanwhile, as a Kafka broker with disks
would across a restart or a network partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class CuttableProxy:
    def __init__(self, listen_port: int, target_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.listen_port, self.target_port = host, listen_port, target_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cuttable-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread.start()

    def _run(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            client_w.close()
            return
        self._writers.update((client_w, broker_w))
        try:
            await asyncio.gather(self._pipe(client_r, broker_w), self._pipe(broker_r, client_w))
        finally:
            self._writers.difference_update((client_w, broker_w))

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.listen_port, reuse_address=True)

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    def restore(self) -> None:
        """Listen (again)."""
        self._run(self._start())

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self._run(self._cut())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
