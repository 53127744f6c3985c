"""The measurements behind ``lockstep bench`` (see docs/performance.md for what each one means).

Every throughput figure is taken the same way for the worker and its baselines: the process under
test consumes a preloaded backlog in its own consumer group, commits every second, and the rate is
the slope of the group's committed offsets between 10% and 90% of the backlog (start-up and the last
commit do not count). All processes share this machine's cores with the embedded broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks import cpulimit
from benchmarks.cpulimit import CpuBudget

REPO = Path(__file__).resolve().parents[1]
#: Scrapes of the one-sample-a-message backlog in a full run (64 GPUs: 897 messages a scrape). 80 (71,760
#: messages) drained within two of a worker's commits on a 2-core Zen 5 machine (the rate was the commit
#: interval's as much as the worker's: ``coarse``); 300 gives several commits inside the fitted window.
SINGLE_SCRAPES = 300
#: ``LOCKSTEP_CARRIER_FORMATS`` of every worker the bench runs: its traffic is native telemetry, so the
#: workers are deployed as for a cluster that ships no real format (docs/contracts.md, "Connecting
#: exporters"), subscribed to the topics that carry data as the baselines and peers are. With every
#: carrier subscribed (the default) a worker spent 4-15 % more CPU a sample draining the same backlog
#: (``worker_ab --drain --after-env``, docs/performance.md "Twenty-second session").
WORKER_CARRIER_FORMATS = "none"


@dataclass
class Run:
    """One throughput measurement."""

    name: str
    processes: int
    messages: int
    samples: int
    seconds: float | None = None
    messages_per_s: float | None = None
    samples_per_s: float | None = None
    rss_mb: list[float] = field(default_factory=list)
    finished: bool = False
    cpu_cores: list[float] | None = None  # CPU used per process under test during the measured window
    broker_cores: float | None = None  # the embedded broker's CPU in the same window
    samples_per_cpu_s: float | None = None  # samples/s over the CPU the processes under test used
    cpu_budget: float | None = None  # cores each process under test was limited to (benchmarks.cpulimit)
    cpu_wait_cores: list[float] | None = None  # per process: time its threads waited for a CPU, in cores
    coarse: bool = False  # too few progress points inside the steady window: fitted over every started point
    why: str | None = None  # why there is no rate, when there is none
    wall_s: float | None = None  # the whole run, start-up included (what the run cost the bench)
    #: With several processes in one group: seconds from their start until the group was stable with all of
    #: them (:meth:`Bench.group_settled`); the rate and CPU are fitted from then on, so the joins and
    #: rebalances of the start (a one-off, seconds each on the embedded broker) are not counted as the
    #: group's steady rate. None: one process, or not waited for.
    settled_s: float | None = None
    #: The samples done at the fit's base point (its first: the progress after the settle, or the first at
    #: or past ``fit_from``): where in the backlog the fitted window began.
    fit_base_samples: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used so far (``/proc/<pid>/stat``); None if gone."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_wait_seconds(pid: int | None) -> float | None:
    """Seconds the process's threads have waited on a run queue for a CPU so far (``schedstat``'s
    run_delay, summed over ``/proc/<pid>/task/*``); None if gone. CPU time plus this wait close to the
    wall time means the process was CPU-bound: it would have run more had the machine had the cores."""
    if pid is None:
        return None
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    except OSError:
        return None
    return total / 1e9


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "shared": True}


def commit_of_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return "unknown"


@dataclass(frozen=True)
class Placement:
    """A preloaded partition's messages: their offsets (ascending) and the samples before each."""

    offsets: np.ndarray
    before: np.ndarray  # before[i]: the samples of the messages at offsets[:i] (one longer than offsets)

    @classmethod
    def of(cls, messages: list[tuple[int, int]]) -> Placement:
        """From ``(offset, samples)`` pairs in any order."""
        pairs = sorted(messages)
        offsets = np.array([o for o, _ in pairs], dtype=np.int64)
        before = np.concatenate([[0], np.cumsum([n for _, n in pairs], dtype=np.int64)])
        return cls(offsets, before)

    def samples_before(self, offset: int) -> int:
        """The samples of the messages below ``offset`` (a committed offset: the next one to read).

        >>> Placement.of([(1, 96), (0, 96), (2, 1)]).samples_before(2), Placement.of([(0, 5)]).samples_before(0)
        (192, 0)
        """
        return int(self.before[int(np.searchsorted(self.offsets, offset, side="left"))])


class Bench:
    """A broker, settings and helpers shared by the measurements of one ``lockstep bench`` run."""

    def __init__(self, bootstrap: str, partitions: int = 8, log_dir: Path | None = None,
                 broker_pid: int | None = None) -> None:
        from models.settings import LockstepSettings

        self.bootstrap = bootstrap
        self.broker_pid = broker_pid
        self.run_id = uuid.uuid4().hex[:6]
        self.partitions = partitions
        self.log_dir = log_dir or Path("/tmp") / f"lockstep-bench-{self.run_id}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.settings = LockstepSettings(  # type: ignore[call-arg]
            _env_file=None, kafka_bootstrap_servers=bootstrap, partitions=partitions,
            topic_prefix=f"b{self.run_id}.", app_id=f"bench-{self.run_id}", data_dir=self.log_dir,
            carrier_formats=WORKER_CARRIER_FORMATS)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}  # pid -> its log file
        self.groups: dict[int, Path] = {}  # pid -> the cgroup holding it to a CPU budget
        self._offset_readers: dict[str, Any] = {}
        #: per preloaded partition, the samples before each offset (:meth:`preload`, :class:`Placement`)
        self.placements: dict[tuple[str, int], Placement] = {}

    def with_prefix(self, name: str) -> Any:
        return self.settings.model_copy(update={"topic_prefix": f"b{self.run_id}-{name}.",
                                                "app_id": f"bench-{self.run_id}-{name}"})

    # -- processes ------------------------------------------------------------------------------
    def spawn_worker(self, settings: Any, tag: str, extra: dict[str, str] | None = None,
                     cpu: CpuBudget | None = None, upto: str | None = None) -> subprocess.Popen[bytes]:
        """``lockstep worker`` of the tree under test (:data:`REPO`); with ``upto``, its ingest stages cut
        after that one (:mod:`benchmarks.ablated_worker`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        env.update({"LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "LOCKSTEP_TOPIC_PREFIX": settings.topic_prefix,
                    "LOCKSTEP_APP_ID": settings.app_id, "LOCKSTEP_PARTITIONS": str(self.partitions),
                    "LOCKSTEP_DATA_DIR": str(self.log_dir / tag), "LOCKSTEP_CARRIER_FORMATS": settings.carrier_formats,
                    # warnings only (each line costs the measured worker); LOCKSTEP_BENCH_WORKER_LOG_LEVEL=info
                    # to see the workers' restores, catch-ups and stalls in <log_dir>/<tag>.log
                    "LOCKSTEP_LOG_LEVEL": os.environ.get("LOCKSTEP_BENCH_WORKER_LOG_LEVEL", "warn"),
                    "LOCKSTEP_WEB_PORT": "0",
                    # /metrics made per request: the live maximum times a worker's drain by its counters
                    # (lockstep_samples_in_total), and with the default cache of 1 s a drain within the 1 s
                    # allowed was seen up to 1 s late: one step in two "fell behind" at a third of a core
                    "LOCKSTEP_WEB_METRICS_CACHE_S": "0",
                    # the baselines' group timeouts (benchmarks.consumers): the embedded broker answers a
                    # new member's join after about half the rebalance timeout, 30 s by default here
                    "LOCKSTEP_KAFKA_SESSION_TIMEOUT_S": "10",
                    # the tree under test first, then what the bench was given (an optional package's --target)
                    "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])})
        env.update(extra or {})
        command = ["-m", "lockstep.cli", "worker"] if upto is None else ["-m", "benchmarks.ablated_worker", upto]
        return self._spawn([sys.executable, *command], env, tag, cpu)

    def spawn_baseline(self, mode: str, group: str, topics: list[str], tag: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        return self._spawn([sys.executable, "-m", "benchmarks.consumers", mode, "--bootstrap", self.bootstrap,
                            "--group", group, "--topics", ",".join(topics)], env, tag)

    def spawn_peer(self, mode: str, group: str, topics: list[str], tag: str) -> tuple[subprocess.Popen[bytes], Path]:
        """A peer framework's process (:mod:`benchmarks.peers`); returns it and its progress file."""
        env = dict(os.environ, PYTHONPATH=str(REPO))
        progress = self.log_dir / f"{tag}.progress"
        return self._spawn([sys.executable, "-m", "benchmarks.peers", mode, "--bootstrap", self.bootstrap,
                            "--group", group, "--topics", ",".join(topics), "--state-dir",
                            str(self.log_dir / f"{tag}-state"), "--progress", str(progress)], env, tag), progress

    def _spawn(self, cmd: list[str], env: dict[str, str], tag: str,
               cpu: CpuBudget | None = None) -> subprocess.Popen[bytes]:
        """Start ``cmd`` logging to ``<tag>.log``; with ``cpu``, inside its own cgroup with that budget
        from its first instruction."""
        group = cpu.create(f"lockstep-bench-{self.run_id}-{tag}") if cpu is not None else None
        out = open(self.log_dir / f"{tag}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    preexec_fn=(lambda: cpulimit.enter(group)) if group is not None else None)
        finally:
            out.close()
        self.procs.append(proc)
        self.logs[proc.pid] = self.log_dir / f"{tag}.log"
        if group is not None:
            self.groups[proc.pid] = group
        return proc

    async def wait_consuming(self, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> float:
        """Wait until the worker ``proc`` says it consumes (its group joined and partitions
        assigned: ``lockstep worker: consuming from ...``); returns the seconds waited. The join takes
        about half the rebalance timeout on the embedded broker, so a fixed sleep is not enough."""
        started = time.monotonic()
        log = self.logs[proc.pid]
        while time.monotonic() - started < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {log.stem} exited with {proc.returncode} before consuming; see {log}")
            if log.exists() and b"lockstep worker: consuming from" in log.read_bytes():
                return time.monotonic() - started
            await asyncio.sleep(0.2)
        raise TimeoutError(f"worker {log.stem} did not start consuming within {timeout:.0f} s; see {log}")

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        group = self.groups.pop(proc.pid, None)
        if group is not None:
            cpulimit.remove(group)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)

    # -- data -----------------------------------------------------------------------------------
    async def preload(self, settings: Any, spec: Any, scrapes: int) -> dict[str, Any]:
        from agents.topics import create_topics
        from lockstep.loadgen import produce

        await create_topics(settings, self.bootstrap)
        found: dict[tuple[str, int], list[tuple[int, int]]] = {}
        loaded = await produce(settings, self.bootstrap, spec, scrapes=scrapes,
                               placed=lambda t, p, off, n: found.setdefault((t, p), []).append((off, n)))
        for tp, messages in found.items():
            self.placements[tp] = Placement.of(messages)
        return loaded

    async def committed(self, group: str, topics: list[str]) -> int:
        """Sum of the group's committed offsets over ``topics`` (a consumer that never joins the group)."""
        return sum((await self._committed(group, topics)).values())

    async def committed_samples(self, group: str, topics: list[str]) -> int:
        """The samples in the messages the group has committed over ``topics`` (preloaded by :meth:`preload`).

        Progress in samples, not messages: the backlog's messages hold 1 to 96 samples (a host's one gauge,
        a node's GPUs), and a consumer does not read the topics in step (aiokafka brings a small topic's
        whole backlog in its first fetches, librdkafka a partition's queue at a time), so a rate fitted to
        messages over a window and scaled by the backlog's mean samples a message was off by the window's
        mix (docs/performance.md, the nineteenth session)."""
        done = await self._committed(group, topics)
        return sum(self.placements[tp].samples_before(offset) for tp, offset in done.items()
                   if offset or tp in self.placements)  # (a partition the preload left empty: none to count)

    async def _committed(self, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = self._offset_readers.get(group)
        if consumer is None:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False)
            await consumer.start()
            self._offset_readers[group] = consumer
        out: dict[tuple[str, int], int] = {}
        for topic in topics:
            for p in range(self.partitions):
                try:
                    offset = await consumer.committed(TopicPartition(topic, p))
                except Exception:
                    offset = None
                out[(topic, p)] = offset or 0
        return out

    async def group_settled(self, group: str, members: int) -> bool:
        """Whether consumer group ``group`` is Stable with ``members`` members (DescribeGroups): every
        worker has joined and the last rebalance of the start is over. False when it cannot be asked."""
        from agents.kafka import describe_group

        try:
            g = await describe_group(self.settings, self.bootstrap, group)
        except Exception:
            return False
        return g.state == "Stable" and len(g.members) == members

    async def lag(self, group: str, topics: list[str]) -> int:
        """Messages the group has not committed yet over ``topics``: the end offsets minus the
        committed ones, per partition never below 0. The ends are a fetch answer's high-water marks
        (:func:`agents.gaps.fetched_ends`): the embedded broker's ListOffsets gives the last batch's first
        offset, not the end, for a partition written in batches (it said 0 for a group 18 messages behind)."""
        from aiokafka import TopicPartition

        from agents.gaps import fetched_ends

        done = await self._committed(group, topics)  # (starts the group's offset reader once)
        parts = [TopicPartition(t, p) for t, p in done]
        ends = await fetched_ends(self.settings, self.bootstrap,
                                  await self._offset_readers[group].end_offsets(parts))
        return sum(max(0, (ends.get(tp) or 0) - done[(tp.topic, tp.partition)]) for tp in parts)

    def worker_samples(self, proc: subprocess.Popen[bytes]) -> float | None:
        """Samples worker ``proc`` has processed so far (``lockstep_samples_in_total`` on its /metrics,
        at the address its log gives); None when it cannot be read."""
        return samples_in(self.logs[proc.pid])

    async def close_readers(self) -> None:
        for consumer in self._offset_readers.values():
            with contextlib.suppress(Exception):
                await consumer.stop()
        self._offset_readers.clear()

    async def watch(self, run: Run, progress: Callable[[], Awaitable[tuple[float | None, int]]],
                    procs: list[subprocess.Popen[bytes]], timeout_s: float, measure_s: float | None = None,
                    settled: Callable[[], Awaitable[bool]] | None = None, fit_from: int = 0) -> Run:
        """Poll ``progress`` (when and how many samples were done: those of the group's committed offsets,
        or a peer's progress file) until the backlog is consumed, or for ``measure_s`` seconds after the
        first progress (``--quick``: a rate needs a window, not the whole backlog); fill ``run``: the
        rate (:func:`slope`), and the CPU the processes and the broker used over the same window.

        ``settled``: when given, the window begins only once it answers True (the group stable with all
        its members): progress before that is not fitted, and ``measure_s`` counts from it. ``fit_from``:
        progress below that many samples is not fitted either (a window that begins where another run's
        began: a consumer reads a small topic's whole backlog first and the 96-sample GPU messages later,
        so a sample's cost depends on where in the backlog it is read)."""
        points: list[tuple[float, int]] = []
        settled_at: float | None = None
        cpu: dict[float, tuple[list[float | None], float | None]] = {}
        waits: dict[float, list[float | None]] = {}
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if settled is not None and settled_at is None and await settled():
                settled_at = time.monotonic()
                run.settled_s = round(settled_at - started, 1)
                points.clear()  # the fit starts here: the next point is its base
            at, done = await progress()
            now = time.monotonic() if at is None else at
            if 0 < done < fit_from:
                points.clear()  # before the window: the next point at or past it is the base
            elif (done and (not points or done != points[-1][1])) or not points:
                points.append((now, done))
                cpu[now] = ([cpu_seconds(p.pid) for p in procs], cpu_seconds(self.broker_pid))
                waits[now] = [cpu_wait_seconds(p.pid) for p in procs]
            sizes = [rss_mb(p.pid) or 0.0 for p in procs]
            run.rss_mb = [round(max(a, b), 1) for a, b in zip(run.rss_mb or [0.0] * len(procs), sizes, strict=True)]
            if done >= run.samples:
                run.finished = True
                break
            first = next((t for t, n in points if n > 0), None)
            if settled is not None and settled_at is None:
                first = None  # not measuring yet
            if measure_s is not None and first is not None and now - first >= measure_s:
                break
            if any(p.poll() is not None for p in procs):
                break
            await asyncio.sleep(0.25)
        run.wall_s = round(time.monotonic() - started, 1)
        run.fit_base_samples = next((n for _, n in points if n > 0), None)
        rate = slope(points, run.samples)
        run.coarse = coarse(points, run.samples)
        if rate is None:
            run.why = (f"{len([p for p in points if p[1] > 0])} progress point(s): the backlog went faster than "
                       "the commit interval can time" if run.finished else "the backlog was not consumed in time")
        else:
            run.samples_per_s = round(rate, 1)
            # messages/s at the backlog's mean samples a message (the fit is over samples: Bench.committed_samples)
            run.messages_per_s = round(rate * run.messages / run.samples, 1)
            run.seconds = round(run.samples / rate, 2)
            window = steady(points, run.samples)
            (a, _), (b, _) = window[0], window[-1]
            (procs_a, broker_a), (procs_b, broker_b) = cpu[a], cpu[b]
            if b > a and None not in procs_a and None not in procs_b:
                run.cpu_cores = [round((y - x) / (b - a), 3) for x, y in zip(procs_a, procs_b, strict=True)
                                 if x is not None and y is not None]
                wa, wb = waits[a], waits[b]
                if None not in wa and None not in wb:
                    waited = [(y - x) / (b - a) for x, y in zip(wa, wb, strict=True) if x is not None and y is not None]
                    # a thread that exited takes its wait out of the sum: no figure rather than a wrong one
                    run.cpu_wait_cores = [round(w, 3) for w in waited] if waited and min(waited) >= 0 else None
                used = sum(run.cpu_cores)
                run.samples_per_cpu_s = round(run.samples_per_s / used, 1) if used > 0 else None
            if b > a and broker_a is not None and broker_b is not None:
                run.broker_cores = round((broker_b - broker_a) / (b - a), 3)
        return run

    async def throughput(self, name: str, settings: Any, loaded: dict[str, Any], kind: str, processes: int = 1,
                         timeout_s: float = 60.0, cpu: CpuBudget | None = None,
                         measure_s: float | None = None, fit_from: int = 0, env: dict[str, str] | None = None) -> Run:
        """Rate of ``processes`` of ``kind`` over the backlog (until consumed, or ``timeout_s``); workers
        each held to the ``cpu`` budget when one is given, with ``env`` on top of :meth:`spawn_worker`'s;
        ``fit_from``: as :meth:`watch`."""
        topics = TopicNames(settings).telemetry
        run = Run(name, processes, loaded["messages"], loaded["samples"],
                  cpu_budget=cpu.cores if cpu is not None else None)
        group = f"{settings.app_id}-{kind}-{processes}-{uuid.uuid4().hex[:4]}"
        procs = []
        files: list[Path] = []
        for i in range(processes):
            tag = f"{name}-{i}"
            if kind in ("worker", "worker-floor"):
                # the floor: a worker that only consumes, hands over, decodes and validates
                procs.append(self.spawn_worker(settings.model_copy(update={"app_id": group}), tag, extra=env,
                                               cpu=cpu, upto="validate" if kind == "worker-floor" else None))
            elif kind.startswith("bytewax"):
                proc, progress_file = self.spawn_peer(kind, group, topics, tag)
                procs.append(proc)
                files.append(progress_file)
            elif kind.startswith("quix"):
                procs.append(self.spawn_peer(kind, group, topics, tag)[0])
            else:
                procs.append(self.spawn_baseline(kind, group, topics, tag))

        async def committed() -> tuple[float | None, int]:
            return None, await self.committed_samples(group, topics)

        async def from_files() -> tuple[float | None, int]:
            return read_progress(files)

        async def settled() -> bool:
            return await self.group_settled(group, processes)

        try:
            return await self.watch(run, from_files if files else committed, procs, timeout_s, measure_s,
                                    settled=settled if kind == "worker" and processes > 1 else None,
                                    fit_from=fit_from)
        finally:
            for p in procs:
                self.stop(p)
            reader = self._offset_readers.pop(group, None)
            if reader is not None:
                with contextlib.suppress(Exception):
                    await reader.stop()


def read_progress(files: list[Path]) -> tuple[float | None, int]:
    """The latest ``<monotonic seconds> <samples done>`` over peer progress files (0 before the first).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "a").write_text("12.5 300\\n"); (d / "b").write_text("12.0 200\\n")
    9
    9
    >>> read_progress([d / "a", d / "b", d / "missing"])
    (12.5, 500)
    """
    at: float | None = None
    done = 0
    for f in files:
        with contextlib.suppress(OSError, ValueError):
            t, n = f.read_text().split()
            at = max(at or 0.0, float(t))
            done += int(n)
    return at, done


def web_address(log: str) -> str | None:
    """The worker's HTTP address from its start-up line in ``log``.

    >>> web_address("x\\nlockstep worker: consuming from 127.0.0.1:9092 as a; API and page at http://127.0.0.1:41234/\\n")
    'http://127.0.0.1:41234'
    >>> web_address("lockstep worker: embedded broker on ...") is None
    True
    """
    marker = "API and page at "
    at = log.rfind(marker)
    if at < 0:
        return None
    url = log[at + len(marker):].split()[0].rstrip("/")
    return url if url.startswith("http") else None


def metric_total(text: str, name: str) -> float:
    """Sum of every sample of counter ``name`` in a Prometheus text exposition.

    >>> text = '# HELP x\\nx_total{a="1"} 2.0\\nx_total{a="2"} 3.0\\nx_created{a="1"} 9\\ny_total 5\\n'
    >>> metric_total(text, "x_total")
    5.0
    """
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            total += float(line.rsplit(None, 1)[1])
    return total


def samples_in(log: Path, timeout: float = 5.0) -> float | None:
    """``lockstep_samples_in_total`` of the worker whose log is ``log``, from its /metrics."""
    import urllib.request

    try:
        url = web_address(log.read_text(errors="replace"))
        if url is None:
            return None
        with urllib.request.urlopen(f"{url}/metrics", timeout=timeout) as resp:
            return metric_total(resp.read().decode(), "lockstep_samples_in_total")
    except (OSError, ValueError):
        return None


class TopicNames:
    def __init__(self, settings: Any) -> None:
        from agents.topics import TopicCatalogue

        cat = TopicCatalogue(settings)
        self.telemetry = cat.telemetry_topics
        self.alerts = cat.alerts


def median_runs(rounds: dict[str, list[dict[str, Any]]], figure: str = "samples_per_s") -> dict[str, Any]:
    """Per name, the run with the median ``figure`` (the lower middle one of an even count), with every
    round's figure under ``rounds``.

    >>> median_runs({"w": [{"samples_per_s": 3.0}, {"samples_per_s": 1.0}, {"samples_per_s": 2.0}]})
    {'w': {'samples_per_s': 2.0, 'rounds': [3.0, 1.0, 2.0]}}
    """
    out = {}
    for name, runs in rounds.items():
        ordered = sorted(runs, key=lambda r: r.get(figure) or 0.0)
        out[name] = dict(ordered[(len(ordered) - 1) // 2], rounds=[r.get(figure) for r in runs])
        if any("samples_per_cpu_s" in r for r in runs):
            out[name]["cpu_rounds"] = [r.get("samples_per_cpu_s") for r in runs]
    return out


def steady(points: list[tuple[float, int]], total: int) -> list[tuple[float, int]]:
    """The (time, committed) points a rate is fitted to: once consumption has started and before the
    last 5% of ``total`` (start-up and the final commit do not count). With fewer than three such
    points, every point after consumption started, the last included (a coarse fit: ``Run.coarse``);
    never the point from before the process consumed, which would count its start-up as work.

    >>> steady([(0.0, 0), (1.0, 100), (2.0, 200), (3.0, 300), (4.0, 400), (5.0, 990)], 1000)
    [(2.0, 200), (3.0, 300), (4.0, 400)]
    >>> steady([(0.0, 0), (7.0, 400), (8.0, 1000)], 1000)
    [(7.0, 400), (8.0, 1000)]
    """
    started = [(t, n) for t, n in points if n > 0]
    mid = [(t, n) for t, n in started[1:] if n <= 0.95 * total] if len(started) > 3 else []
    if len(mid) < 3:
        mid = started if len(started) >= 2 else points
    return mid


def coarse(points: list[tuple[float, int]], total: int) -> bool:
    """Whether :func:`steady` had to fall back to every started point (fewer than three inside the window).

    >>> coarse([(0.0, 0), (7.0, 400), (8.0, 1000)], 1000), coarse([(0.0, 0), (1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4)], 9)
    (True, False)
    """
    started = [(t, n) for t, n in points if n > 0]
    return len(started) <= 3 or len([1 for _, n in started[1:] if n <= 0.95 * total]) < 3


def slope(points: list[tuple[float, int]], total: int) -> float | None:
    """Messages/s: least-squares slope of (time, committed) over :func:`steady` points; None with < 2.

    >>> slope([(0.0, 0), (1.0, 100), (2.0, 200), (3.0, 300), (4.0, 400)], 1000)
    100.0
    """
    mid = steady(points, total)
    if len(mid) < 2:
        return None
    t = np.array([p[0] for p in mid])
    n = np.array([p[1] for p in mid], dtype=float)
    if t[-1] - t[0] <= 0:
        return None
    return float(round(np.polyfit(t, n, 1)[0], 6))


# -- state --------------------------------------------------------------------------------------
def state_per_series(series_target: int) -> dict[str, Any]:
    """Bytes of state per series in one pipeline holding about ``series_target`` series.

    Measured three ways: allocated numpy arrays plus the registry's objects (``state_bytes``), the
    Python heap growth seen by tracemalloc while the series are created and learned, and the snapshot
    (what the changelog carries). The partition's series cap is raised to hold the target (the default
    cap, 50,000, would measure 50,000 series however many are asked for).
    """
    import tracemalloc

    from lockstep.loadgen import LoadGenerator, LoadSpec
    from streams.detect import DetectorBank, DetectorConfig
    from streams.inventory import InventoryIndex
    from streams.pipeline import Origin, PartitionPipeline
    from streams.series import SeriesLimits

    per_gpu = LoadGenerator(LoadSpec(gpus=64)).series / 64
    gen = LoadGenerator(LoadSpec(gpus=max(8, int(series_target / per_gpu))))
    inv = InventoryIndex()
    from models.inventory import inventory_adapter

    for doc in gen.inventory():
        inv.apply(inventory_adapter.validate_python(doc))
    scrapes = [[(v, Origin("t", 0, i)) for i, (_, _, v) in enumerate(gen.messages(k))] for k in range(3)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    limits = SeriesLimits(max_series=max(SeriesLimits().max_series, 2 * series_target))
    config = DetectorConfig(limits=limits)
    # as in a worker: the detector's arrays in a bank shared by its input partitions (rows mapped by id)
    pipe = PartitionPipeline("t:0", config, inv, bank=DetectorBank(config))
    for msgs in scrapes:
        pipe.process_many(msgs)
    heap = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    n = len(pipe.registry)
    parts = pipe.state_bytes()
    blob = pipe.snapshot()
    return {"series": n, "heap_bytes_per_series": round(heap / n, 1),
            "arrays_and_registry_bytes_per_series": round(parts["per_series"], 1),
            # the same without the validate stage's row index (a cache rebuilt from the registry, not snapshotted)
            "state_bytes_per_series": round(parts["per_series"] - parts.get("row_index", 0.0) / n, 1),
            "snapshot_bytes_per_series": round(len(blob) / n, 1),
            "parts_bytes": {k: round(v / n, 1) for k, v in parts.items() if k != "per_series"}}


# -- latency ------------------------------------------------------------------------------------
#: The issue's latency goal is at this share of the maximum sustainable rate (:func:`live_max`).
LATENCY_HIGH_LOAD = 0.8
#: A live step (:data:`LIVE_STEP_S` of traffic) is sustained when the worker has processed everything
#: sent within this long after the last scrape was acknowledged: a worker 10 % short of the rate is a
#: second behind by then, one that keeps up is an ingest batch or two behind (0.3-0.8 s measured at 80 %
#: of the machine's maximum: the cadence, the batch, the wait for the correlate side). Until the
#: eighteenth session 0.5 s: inside that jitter, so one slow batch at a step's end failed a step the
#: worker sustained (maxima of 68,600-157,500 for one tree, and 0 once). Longer steps would tell a
#: smaller shortfall, but the embedded broker keeps every record in memory: four probes of 20 s steps
#: in one broker grew it to 23.8 GB and swapped the machine.
LIVE_DRAIN_S = 1.0
LIVE_STEP_S = 10.0
#: Nodes a job in the latency run's cluster (and the live maximum's): 29 jobs on 1,024 GPUs (90 % busy).
LATENCY_JOB_NODES = 4
#: The latency run's incidents (and the live maximum's): one every this many scrapes, each this long.
LATENCY_SPACING = 2
LATENCY_INCIDENT_S = 40.0
#: Scrapes of warm-up before the first incident (the detectors' baselines), in both runs.
LATENCY_WARMUP = 40


def next_live_rate(rate: float, kept_up: bool, lo: float, hi: float | None) -> tuple[float, float, float | None]:
    """One step of the search for the highest live rate a worker sustains: ``(next rate, lo, hi)``.

    ``lo`` is the highest rate sustained so far, ``hi`` the lowest not sustained (None: none yet).
    Upward by a quarter until a step fails, then bisection.

    >>> next_live_rate(100.0, True, 0.0, None)
    (125.0, 100.0, None)
    >>> next_live_rate(125.0, False, 100.0, None)
    (112.5, 100.0, 125.0)
    >>> next_live_rate(80.0, False, 0.0, None)
    (56.0, 0.0, 80.0)
    """
    if kept_up:
        lo = max(lo, rate)
        return (rate * 1.25 if hi is None else (lo + hi) / 2.0), lo, hi
    hi = rate if hi is None else min(hi, rate)
    return ((lo + hi) / 2.0 if lo > 0 else rate * 0.7), lo, hi


async def live_max(bench: Bench, start: float, gpus: int = 1024, steps: int = 4,
                   name: str = "livemax", jobs_nodes: int = LATENCY_JOB_NODES,
                   incidents: bool = True) -> dict[str, Any]:
    """The highest rate one worker process keeps up with **live**: the load generator sends
    :data:`LIVE_STEP_S` of scrapes at a rate, and the step is sustained if the worker has processed every
    sample within :data:`LIVE_DRAIN_S` of the last scrape's acknowledgement; :func:`next_live_rate` picks the next
    rate (``steps`` steps from ``start``, one worker throughout, after a warm-up that registers the
    series). A backlog's rate overstates it: there a batch holds many scrapes of each partition, live
    one or two, so the fixed costs of each batch and round weigh more.

    The cluster is the latency run's (``jobs_nodes`` nodes a job: :data:`LATENCY_JOB_NODES`), so "80 % of
    the live maximum" is 80 % of what the worker sustains on the traffic whose latency is measured. Until
    the thirteenth session it was the load generator's default of 32 nodes a job (4 jobs on 1,024 GPUs
    instead of 29): cheaper per sample (per-job correlation, step times and peers), so the latency run
    ran at more than 80 % of its own maximum. For the same reason the traffic has the latency run's
    incidents (``incidents``, since the eighteenth session): one every :data:`LATENCY_SPACING` scrapes after
    the same warm-up, each :data:`LATENCY_INCIDENT_S` long, so about 20 of the 29 jobs degraded at a time
    as in the middle of a latency run; their anomalies, evidence and verdicts cost the worker 1.5-3x a
    quiet batch's time (traced, docs/performance.md). Without them the maximum was of quiet traffic, and
    80 % of it was close to all the worker had once the incidents began.
    """
    from agents.topics import create_topics
    from lockstep.loadgen import LoadGenerator, LoadSpec, produce

    settings = bench.with_prefix(name)
    await create_topics(settings, bench.bootstrap)
    proc = bench.spawn_worker(settings, f"{name}-worker")
    per_scrape = LoadGenerator(LoadSpec(gpus=gpus, nodes_per_job=jobs_nodes)).samples_per_scrape
    most = LATENCY_WARMUP + steps * max(10, math.ceil(LIVE_STEP_S * start * 1.25 ** steps / per_scrape))
    spec = LoadSpec(gpus=gpus, nodes_per_job=jobs_nodes, incident_s=LATENCY_INCIDENT_S, incidents=tuple(
        (j, LATENCY_WARMUP + j * LATENCY_SPACING) for j in range((most - LATENCY_WARMUP) // LATENCY_SPACING + 1)
    ) if incidents else ())
    gen = LoadGenerator(spec)
    trials: list[dict[str, Any]] = []
    sent_total = 0

    async def drained(timeout_s: float) -> float | None:
        """Seconds until the worker has processed ``sent_total`` samples (None: not within the timeout)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            done = await asyncio.to_thread(bench.worker_samples, proc)
            if done is not None and done >= sent_total:
                return time.monotonic() - t0
            await asyncio.sleep(0.05)
        return None

    try:
        await bench.wait_consuming(proc)
        warm = await produce(settings, bench.bootstrap, spec, rate=0.5 * start, scrapes=LATENCY_WARMUP)
        k, sent_total = LATENCY_WARMUP, warm["samples"]
        await drained(60.0)
        rate, lo, hi = start, 0.0, None
        for _ in range(steps):
            scrapes = max(10, math.ceil(LIVE_STEP_S * rate / per_scrape))
            cpu0 = cpu_seconds(proc.pid)
            summary = await produce(settings, bench.bootstrap, spec, rate=rate, scrapes=scrapes, inventory=False,
                                    first_scrape=k)
            cpu1 = cpu_seconds(proc.pid)
            k += scrapes
            sent_total += summary["samples"]
            lag_s = await drained(LIVE_DRAIN_S)
            sent = float(summary["samples_per_s"] or 0.0)
            kept = lag_s is not None and lag_s <= LIVE_DRAIN_S and sent >= 0.95 * rate
            cores = (round((cpu1 - cpu0) / summary["seconds"], 3) if cpu0 is not None and cpu1 is not None
                     and summary["seconds"] else None)
            trials.append({"rate_samples_per_s": round(rate, 1), "sent_samples_per_s": sent, "kept_up": kept,
                           "drained_after_s": None if lag_s is None else round(lag_s, 3), "cpu_cores": cores})
            if not kept:
                await drained(120.0)  # the next step starts from a drained worker
            rate, lo, hi = next_live_rate(rate, kept, lo, hi)
    finally:
        bench.stop(proc)
    return {"live_max_samples_per_s": round(lo, 1), "trials": trials, "gpus": gpus,
            "jobs": len(gen.jobs), "step_s": LIVE_STEP_S, "drain_allowed_s": LIVE_DRAIN_S,
            "incidents": {"every_scrapes": LATENCY_SPACING, "each_s": LATENCY_INCIDENT_S} if incidents else None}


def _sent_rate(lat: dict[str, Any]) -> float:
    """Samples/s the load generator actually sent in a latency run (it can fall behind its target)."""
    produced = lat.get("produced") or {}
    return float(produced.get("samples_per_s") or 0.0)


async def alert_latency(bench: Bench, rate: float, gpus: int = 1024, jobs_nodes: int = LATENCY_JOB_NODES,
                        incidents: int = 24,
                        warmup: int = LATENCY_WARMUP, spacing: int = LATENCY_SPACING, tail: int = 30,
                        name: str = "latency", workers: int = 1, cpu: CpuBudget | None = None,
                        settle_s: float = 8.0) -> dict[str, Any]:
    """Alert latency at ``rate`` samples/s: the scrape that completes an incident's evidence is acked by
    the broker at ``t0``; its alert is read from the alerts topic at ``t1``; latency = ``t1 - t0``.

    The evidence of a slowdown with onset ``O`` is complete once every input's event time passed
    ``O + max(grace, job-end margin) + allowed lateness`` (the verdict's wait and the correlation
    watermark's rule): the first scrape at or after it. The event-time wait itself is policy (a job
    that ends within the margin is no slowdown: docs/correlation.md), not processing latency.
    ``tail`` scrapes follow the last incident so the watermark passes it; after them the run waits
    until every incident has fired (at most ``settle_s`` more: an alert later than that is not counted).

    ``workers`` worker processes share the partitions (each held to ``cpu`` when given); traffic starts
    once every one of them consumes. With more than one, the document also has the group's lag
    (uncommitted telemetry messages, read every second while the traffic runs: its maximum, its
    median and the last reading), each worker's samples/s over the traffic (its
    ``lockstep_samples_in_total``) and the CPU each used.
    """
    from aiokafka import AIOKafkaConsumer

    from agents.topics import create_topics
    from lockstep.loadgen import INCIDENT_CHAIN, LoadGenerator, LoadSpec, produce

    settings = bench.with_prefix(name)  # its own topics: a repeated run must not read the last one's alerts
    lateness, wait = settings.allowed_lateness_s, max(settings.grace_s, settings.job_end_margin_s)
    spec = LoadSpec(gpus=gpus, nodes_per_job=jobs_nodes,
                    incidents=tuple((j, warmup + j * spacing) for j in range(incidents)),
                    incident_s=LATENCY_INCIDENT_S)
    jobs = LoadGenerator(spec).jobs
    await create_topics(settings, bench.bootstrap)
    procs = [bench.spawn_worker(settings, f"{name}-worker" + (f"-{i}" if workers > 1 else ""), cpu=cpu)
             for i in range(workers)]
    topics = TopicNames(settings).telemetry
    lags: list[int] = []
    acked: dict[int, float] = {}
    received: list[tuple[float, dict[str, Any]]] = []
    stop = asyncio.Event()
    consumer = AIOKafkaConsumer(TopicNames(settings).alerts, bootstrap_servers=bench.bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await consumer.start()

    fired: set[Any] = set()
    all_fired = asyncio.Event()

    async def read_alerts() -> None:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50)
            now = time.monotonic()
            for msgs in batches.values():
                for m in msgs:
                    alert = orjson.loads(m.value)
                    received.append((now, alert))
                    if alert.get("status") == "firing" and alert.get("type") == "job_slowdown":
                        fired.add(alert.get("alert_id"))
            if len(fired) >= incidents:
                all_fired.set()

    async def watch_lag() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                lags.append(await bench.lag(settings.app_id, topics))
            await asyncio.sleep(1.0)

    reader = asyncio.create_task(read_alerts())
    lag_task: asyncio.Task[None] | None = None
    per_worker: list[float | None] = []
    cores: list[float] = []
    rss_all: list[float | None] = []
    try:
        for proc in procs:
            await bench.wait_consuming(proc)  # measured from steady state, not start-up
        if workers > 1:
            lag_task = asyncio.create_task(watch_lag())
        done0 = [bench.worker_samples(p) for p in procs]
        cpu0 = [cpu_seconds(p.pid) for p in procs]
        t0 = time.monotonic()
        # The last incident's verdict needs the watermark past its symptom (the chain's last layer) plus
        # the verdict's wait (grace, or the job-end margin if longer) plus the lateness: a tail shorter
        # than that left the last incident without an alert ("5 of 6" in every quick run since the margin).
        need = math.ceil((max(INCIDENT_CHAIN.values()) + wait + lateness) / spec.interval_s) + 5
        scrapes = warmup + incidents * spacing + max(tail, need)
        summary = await produce(settings, bench.bootstrap, spec, rate=rate, scrapes=scrapes,
                                on_scrape=lambda k, ts, wall: acked.__setitem__(k, wall))
        span = time.monotonic() - t0
        done1 = [bench.worker_samples(p) for p in procs]
        cpu1 = [cpu_seconds(p.pid) for p in procs]
        per_worker = [round((b - a) / span, 1) if a is not None and b is not None else None
                      for a, b in zip(done0, done1, strict=True)]
        cores = [round((b - a) / span, 3) for a, b in zip(cpu0, cpu1, strict=True) if a is not None and b is not None]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_fired.wait(), settle_s)
    finally:
        stop.set()
        await reader
        if lag_task is not None:
            await lag_task
        await consumer.stop()
        rss_all = [rss_mb(p.pid) for p in procs]
        rss = rss_all[0]
        for proc in procs:
            bench.stop(proc)
    seen, lat = slowdown_latencies(received, acked, spec, wait + lateness)
    firing = len(seen)
    arr = np.array(lat) if lat else np.array([np.nan])
    return {"rate_samples_per_s": round(rate, 1), "gpus": gpus, "jobs": len(jobs), "produced": summary,
            "incidents": incidents,
            "alerts_firing": firing,
            "measured": len(lat), "p50_s": round(float(np.percentile(arr, 50)), 3),
            "p99_s": round(float(np.percentile(arr, 99)), 3), "max_s": round(float(np.max(arr)), 3),
            "worker_rss_mb": rss, **({} if workers == 1 else {
                "workers": workers, "cpu_budget": cpu.cores if cpu is not None else None,
                "worker_rss_mb_each": rss_all, "per_worker_samples_per_s": per_worker, "cpu_cores": cores,
                "lag_messages": lag_summary(lags)})}


def slowdown_latencies(received: list[tuple[float, dict[str, Any]]], acked: dict[int, float], spec: Any,
                       wait_s: float) -> tuple[dict[str, float], list[float]]:
    """The first firing of each ``job_slowdown`` alert in ``received`` (``(monotonic time read, alert)``, in
    the order read), and the latency of each: from the broker's ack of the scrape that completed its
    evidence (``acked``: scrape -> monotonic time) to the read. Returns ``({alert_id: read at}, latencies)``.

    The verdict waits ``wait_s`` of event time after the symptom's onset (the alert's ``started_at``:
    max(grace, job-end margin) in rules/slowdown.py, plus the watermark's allowed lateness): the first
    scrape at or after it is the reference. With grace alone (5 s short of the margin) every run counted
    5 scrapes of event time as latency: ~1 s in a quick run, ~14 s where a scrape took 2.8 s of wall time.
    A revision of a firing alert (late evidence) is not a latency.

    >>> from lockstep.loadgen import LoadSpec
    >>> spec = LoadSpec(start_ts=1764502800.0)
    >>> a = {"status": "firing", "type": "job_slowdown", "alert_id": "a1", "started_at": "2025-11-30T11:40:10Z"}
    >>> slowdown_latencies([(7.5, a), (9.0, a)], {19: 7.0}, spec, 9.0)
    ({'a1': 7.5}, [0.5])
    """
    from models.timeutil import parse_ts

    lat: list[float] = []
    seen: dict[str, float] = {}
    for now, alert in received:
        if alert.get("status") != "firing" or alert.get("type") != "job_slowdown" or alert.get("alert_id") in seen:
            continue
        seen[str(alert.get("alert_id"))] = now
        onset = parse_ts(alert["started_at"]) if isinstance(alert.get("started_at"), str) else None
        if onset is None:
            continue
        k = math.ceil((onset + wait_s - spec.start_ts) / spec.interval_s - 1e-9)
        if k in acked:
            lat.append(now - acked[k])
    return seen, lat


def lag_summary(lags: list[int]) -> dict[str, Any]:
    """The lag readings of a live run: their maximum, median and last (None without any).

    >>> lag_summary([0, 120, 40, 3])
    {'max': 120, 'median': 21.5, 'last': 3, 'readings': 4}
    >>> lag_summary([])
    {'max': None, 'median': None, 'last': None, 'readings': 0}
    """
    if not lags:
        return {"max": None, "median": None, "last": None, "readings": 0}
    return {"max": max(lags), "median": float(np.median(lags)), "last": lags[-1], "readings": len(lags)}


#: Peer rows (benchmarks.peers): the label of each in the JSON document.
PEER_RUNS = {"quix": "peer_quix", "quix-memory": "peer_quix_memory", "bytewax": "peer_bytewax",
             "bytewax-recovery": "peer_bytewax_recovery"}


# -- scale-out ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScaleSpec:
    """The scale run (``lockstep bench --scale N``): ``workers`` worker processes, each held to
    ``cores`` by a CPU quota, on ``partitions`` partitions of each telemetry topic, against one worker
    at the same budget on the same backlog; then live traffic of a ``gpus``-GPU cluster at ``load`` of
    what the ``workers`` sustained, for lag, alert latency and each worker's samples/s. ``load`` is
    half, as for the one-worker latency row: on this shared machine the load generator and the broker
    take their CPU from the workers' during the live run, not during the backlog run.

    The backlog is ``scrapes`` scrapes of the ``gpus``-GPU cluster. The ``workers`` run first, fitted from
    when their group settled to the backlog's last 5 %; then the one worker, fitted over the same stretch
    of the backlog (from the samples the group had done when its fit began: a sample's cost depends on
    where in the backlog it is read, 1-sample host messages first, 96-sample GPU ones later). With
    ``measure_s``, each run stops that many seconds into its window instead (quicker, and the two
    windows then cover different stretches).
    """

    workers: int = 4
    cores: float = 0.3
    partitions: int = 16
    gpus: int = 10_000
    scrapes: int = 90
    measure_s: float | None = None
    load: float = 0.5
    #: The live run waits this long after its last scrape for the incidents' alerts (a worker behind
    #: its traffic alerts late; an alert later than this is not counted).
    settle_s: float = 60.0
    incidents: int = 6
    warmup: int = 25
    tail: int = 20


def natural_rate(gpus: int) -> float:
    """Samples/s a ``gpus``-GPU cluster of :mod:`lockstep.loadgen` sends in real time (a scrape a second)."""
    from lockstep.loadgen import LoadGenerator, LoadSpec

    spec = LoadSpec(gpus=gpus)
    return LoadGenerator(spec).samples_per_scrape / spec.interval_s


def live_rate(natural: float, sustained: float | None, load: float) -> tuple[float, float]:
    """The live run's samples/s and its share of the cluster's real-time rate: the cluster's traffic
    slowed down (its scrapes further apart in wall time, the same messages and event times) to
    ``load`` of what the budgeted workers ``sustained``, never faster than real time; without a
    sustained rate, ``load`` of real time.

    >>> live_rate(139_629.0, 100_000.0, 0.8)
    (80000.0, 0.573)
    >>> live_rate(10_000.0, 100_000.0, 0.8)
    (10000.0, 1.0)
    >>> live_rate(1000.0, None, 0.5)
    (500.0, 0.5)
    """
    rate = load * sustained if sustained else load * natural
    rate = min(rate, natural)
    return round(rate, 1), round(rate / natural, 3)


def scale_ratio(many: dict[str, Any], one: dict[str, Any], figure: str = "samples_per_s") -> float | None:
    """``many`` workers' ``figure`` over one worker's (None when either has none).

    >>> scale_ratio({"samples_per_s": 340.0}, {"samples_per_s": 100.0})
    3.4
    >>> scale_ratio({"samples_per_s": None}, {"samples_per_s": 100.0}) is None
    True
    """
    a, b = many.get(figure), one.get(figure)
    return round(a / b, 3) if a and b else None


async def scale_run(bootstrap: str, spec: ScaleSpec, cpu: CpuBudget, say: Any = print,
                    broker_pid: int | None = None, elapsed: Callable[[], str] = lambda: "") -> dict[str, Any]:
    """The scale run of :class:`ScaleSpec` on its own topics (``spec.partitions`` partitions each):
    one budgeted worker, then ``spec.workers``, on one backlog; then the live run."""
    from lockstep.loadgen import LoadGenerator, LoadSpec

    bench = Bench(bootstrap, partitions=spec.partitions, broker_pid=broker_pid)
    settings = bench.with_prefix("scale")
    natural = natural_rate(spec.gpus)
    out: dict[str, Any] = {"spec": dict(spec.__dict__), "cpu_budget": cpu.cores, "natural_samples_per_s": natural,
                           "series": LoadGenerator(LoadSpec(gpus=spec.gpus)).series}
    try:
        loaded = await bench.preload(settings, LoadSpec(gpus=spec.gpus), spec.scrapes)
        out["loaded"] = loaded
        say(f"{elapsed()} scale: preloaded {loaded['messages']:,} messages, {loaded['samples']:,} samples of a "
            f"{spec.gpus:,}-GPU cluster ({out['series']:,} series, {natural:,.0f} samples/s in real time) on "
            f"{spec.partitions} partitions a topic, in {loaded['seconds']:.0f} s")
        runs: dict[str, dict[str, Any]] = {}
        fit_from = 0
        # (at 0.3 core one worker reads the 10,000-GPU backlog's 12.6 million samples in about two minutes)
        timeout_s = 120.0 + (spec.measure_s if spec.measure_s is not None else 4.0 * loaded["samples"] / 50_000)
        for name, n in (("many", spec.workers), ("one", 1)):
            run = await bench.throughput(f"scale-{n}", settings, loaded, "worker", n, cpu=cpu, timeout_s=timeout_s,
                                         measure_s=spec.measure_s, fit_from=fit_from)
            runs[name] = run.as_dict()
            if spec.measure_s is None:
                fit_from = run.fit_base_samples or 0
            say(f"{elapsed()}   {describe(f'scale {n} worker(s)', run)}, fitted from sample "
                f"{run.fit_base_samples or 0:,}")
        out["one"], out["many"] = runs["one"], runs["many"]
        out["ratio"] = scale_ratio(runs["many"], runs["one"])
        out["ratio_per_cpu_s"] = scale_ratio(runs["many"], runs["one"], "samples_per_cpu_s")
        rate, share = live_rate(natural, runs["many"].get("samples_per_s"), spec.load)
        out["live_share_of_real_time"] = share
        live = await alert_latency(bench, rate, gpus=spec.gpus, incidents=spec.incidents, warmup=spec.warmup,
                                   tail=spec.tail, name="scale-live", workers=spec.workers, cpu=cpu,
                                   settle_s=spec.settle_s)
        out["live"] = live
        say(f"{elapsed()} scale live at {rate:,.0f} samples/s ({share:.0%} of the cluster's real time): p50 "
            f"{live['p50_s']} s, p99 {live['p99_s']} s ({live['measured']} of {live['incidents']} incidents), lag "
            f"{live['lag_messages']}, per worker {live['per_worker_samples_per_s']} samples/s on {live['cpu_cores']}")
    finally:
        bench.stop_all()
        await bench.close_readers()
    return out


async def run_all(bootstrap: str, quick: bool = False, say: Any = print, repeat: int = 1,
                  broker_pid: int | None = None, worker_cores: float | None = 0.6,
                  peer_rows: bool | None = None, scale: ScaleSpec | None = None,
                  scale_only: bool = False) -> dict[str, Any]:
    """Every measurement of ``lockstep bench``; returns the JSON document.

    ``scale``: also the scale run (:class:`ScaleSpec`, :func:`scale_run`), last; ``scale_only``: only
    it (the document then has no other figures).

    ``worker_cores``: the scaling runs are repeated with each worker process held to that many cores
    (:mod:`benchmarks.cpulimit`), so that two workers and the broker fit in the machine; None (or no
    writable cgroup) skips them and the document says why.

    With ``repeat`` > 1 the throughput runs and the latency run are repeated (interleaved, baselines
    included, so each round has its own same-conditions ratio) and the document keeps the run with the
    median figure plus every round's figures (``rounds``): on a shared machine one run can be 20 %
    off either way.

    ``quick``: the headline rows only, each from an 8 s window instead of the whole backlog: batched
    (bare, do-nothing Faust agent, worker; the peers only when asked), one sample
    per message (bare, do-nothing agent, worker), state at 10k series and a shorter latency run (6
    incidents instead of 24); no
    scaling or budget runs, no 100k-series worker. What it skips, it says.

    ``peer_rows``: run the peer frameworks (:mod:`benchmarks.peers`) that are installed; by default
    yes, except with ``quick`` (each peer's start-up, topic creation and group join take 10-25 s here).
    """
    from benchmarks import peers
    from lockstep.loadgen import LoadGenerator, LoadSpec

    began = time.monotonic()

    def elapsed() -> str:
        return f"[{time.monotonic() - began:5.0f} s]"

    bench = Bench(bootstrap, broker_pid=broker_pid)
    out: dict[str, Any] = {"machine": machine(), "commit": commit_of_head(), "quick": quick,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "worker_carrier_formats": WORKER_CARRIER_FORMATS}
    measure_s = 8.0 if quick else None
    missing = peers.available()
    if peer_rows is None:
        peer_rows = not quick
    peer_kinds = [k for k in PEER_RUNS if peer_rows and missing[k] is None]
    out["peers"] = {k: missing[k] or ("measured" if k in peer_kinds else "not run with --quick (add --peers)")
                    for k in PEER_RUNS}
    for kind, why in out["peers"].items():
        if why != "measured" and not scale_only:
            say(f"peer row {kind}: skipped, {why}")
    if scale_only:
        del out["peers"]
        await _scale(out, bootstrap, scale or ScaleSpec(), say, broker_pid, elapsed)
        return _finished(out, began, say, elapsed)
    try:
        # 1. batched messages: a scrape per message
        spec = LoadSpec(gpus=1024)
        gen = LoadGenerator(spec)
        batched = bench.with_prefix("batched")
        scrapes = 100 if quick else 300
        loaded = await bench.preload(batched, spec, scrapes)
        say(f"{elapsed()} batched: preloaded {loaded['messages']:,} messages, {loaded['samples']:,} samples "
            f"({loaded['samples'] / loaded['messages']:.1f} samples/message, {gen.series:,} series)")
        if quick:
            cpu, why = None, "not run with --quick"
            say("CPU quota: none applied (--quick skips the scaling runs that use one)")
        else:
            cpu, why = cpulimit.budget(worker_cores)
            say(f"CPU quota: {'applied to the budgeted scaling runs only, ' if cpu else 'none applied: '}{why}"
                + (" (--worker-cores 0 to skip them)" if cpu else ""))
        plan: list[tuple[str, str, int, CpuBudget | None]] = [
            ("bare", "bare", 1, None), ("faust_stock", "faust-stock", 1, None), ("worker", "worker", 1, None)]
        plan += [(PEER_RUNS[k], k, 1, None) for k in peer_kinds]
        if not quick:
            plan += [("worker_floor", "worker-floor", 1, None), ("faust_noop", "faust", 1, None),
                     ("worker_x2", "worker", 2, None), ("bare_x2", "bare", 2, None)]
        if cpu is not None:
            plan += [("worker_budget", "worker", 1, cpu), ("worker_budget_x2", "worker", 2, cpu)]
        rounds: dict[str, list[dict[str, Any]]] = {}
        for r in range(repeat):
            for name, kind, n, limit in plan:
                peer = kind in PEER_RUNS
                # a peer reads the whole backlog even with --quick: librdkafka hands it one partition's
                # queue at a time, so a window's mix of topics (1 to 96 samples a message) is not the
                # backlog's, and samples/s from a window would be off (Quix: 6,000 msg/s on the small
                # messages first, 250 on the GPU ones); aiokafka fetches every partition each time
                run = await bench.throughput(f"batched-{name}-{r}", batched, loaded, kind, n, cpu=limit,
                                             timeout_s=150.0 if peer else 60.0 if limit is None else 90.0,
                                             measure_s=None if peer else measure_s)
                rounds.setdefault(name, []).append(run.as_dict())
                say(f"{elapsed()}   {describe(name, run)}")
        out["batched"] = {"loaded": loaded, "runs": median_runs(rounds), "cpu_budget": why}
        # 2. one sample per message
        sspec = LoadSpec(gpus=64, single=True)
        single = bench.with_prefix("single")
        sloaded = await bench.preload(single, sspec, 30 if quick else SINGLE_SCRAPES)
        say(f"{elapsed()} single: preloaded {sloaded['messages']:,} messages of one sample")
        srounds: dict[str, list[dict[str, Any]]] = {}
        splan = [("bare", "bare"), ("faust_stock", "faust-stock"), ("worker", "worker")]
        if not quick:
            splan.insert(2, ("faust_noop", "faust"))
        for r in range(repeat):
            for name, kind in splan:
                run = await bench.throughput(f"single-{name}-{r}", single, sloaded, kind, measure_s=measure_s)
                srounds.setdefault(name, []).append(run.as_dict())
                say(f"{elapsed()}   {describe(name, run)}")
        out["single"] = {"loaded": sloaded, "runs": median_runs(srounds)}
        # 3. state per series, and a worker's resident memory with 100k series
        out["state"] = {}
        for target in (10_000,) if quick else (10_000, 100_000):
            st = state_per_series(target)
            out["state"][str(target)] = st
            say(f"{elapsed()} state at {st['series']:,} series: {st['arrays_and_registry_bytes_per_series']:,.0f} "
                f"B/series (of it the row index {st['parts_bytes'].get('row_index', 0):,.0f}; heap "
                f"{st['heap_bytes_per_series']:,.0f}, snapshot {st['snapshot_bytes_per_series']:,.0f})")
        if quick:
            say("state at 100k series and the 100k-series worker: not run with --quick")
        else:
            big = LoadSpec(gpus=7300)
            big_settings = bench.with_prefix("rss")
            big_loaded = await bench.preload(big_settings, big, 3)
            run = await bench.throughput("rss-worker", big_settings, big_loaded, "worker")
            out["state"]["worker_100k"] = {"series": LoadGenerator(big).series, **run.as_dict()}
            say(f"{elapsed()} worker with {LoadGenerator(big).series:,} series: rss {run.rss_mb} MB")
        # 4. alert latency at half the worker's batched rate
        worker_rate = out["batched"]["runs"]["worker"]["samples_per_s"] or 20000.0
        lats = []
        for r in range(repeat):
            # quick: fewer incidents and scrapes on the same cluster (a smaller one at the same samples/s
            # sends more scrapes a second, which costs the worker more: p99 5.4-9.7 s at 256 GPUs)
            incidents, warmup, tail = (6, 25, 20) if quick else (24, 40, 30)
            lat = await alert_latency(bench, 0.5 * worker_rate, name=f"latency-{r}", incidents=incidents,
                                      warmup=warmup, tail=tail)
            lats.append(lat)
            say(f"{elapsed()} latency at {lat['rate_samples_per_s']:,.0f} samples/s: p50 {lat['p50_s']} s, "
                f"p99 {lat['p99_s']} s ({lat['measured']} of {lat['incidents']} incidents)")
        out["latency"] = median_runs({"latency": lats}, figure="p99_s")["latency"]
        # 5. the goal's row: the highest rate a worker sustains live, then alert latency at 80% of it
        found = await live_max(bench, 0.7 * worker_rate)
        out["live_max"] = found
        for t in found["trials"]:
            say(f"{elapsed()}   live {t['rate_samples_per_s']:,.0f} samples/s: "
                + (f"kept up (drained {t['drained_after_s']} s after the last scrape)" if t["kept_up"] else
                   f"behind (sent {t['sent_samples_per_s']:,.0f}; drained after {t['drained_after_s']} s)")
                + f", {t['cpu_cores']} core")
        live_rate = found["live_max_samples_per_s"] or 0.5 * worker_rate
        say(f"{elapsed()} live maximum: {live_rate:,.0f} samples/s ({live_rate / worker_rate:.0%} of the backlog rate)")
        lats80 = []
        for r in range(repeat):
            lat = await alert_latency(bench, LATENCY_HIGH_LOAD * live_rate, name=f"latency80-{r}",
                                      incidents=incidents, warmup=warmup, tail=tail)
            lats80.append(lat)
            say(f"{elapsed()} latency at {lat['rate_samples_per_s']:,.0f} samples/s "
                f"({LATENCY_HIGH_LOAD:.0%} of the live max): p50 {lat['p50_s']} s, p99 {lat['p99_s']} s "
                f"({lat['measured']} of {lat['incidents']} incidents; "
                f"sent {_sent_rate(lat):,.0f} samples/s)")
        out["latency_80"] = median_runs({"latency": lats80}, figure="p99_s")["latency"]
        if scale is not None:
            bench.stop_all()
            await _scale(out, bootstrap, scale, say, broker_pid, elapsed)
    finally:
        bench.stop_all()
    return _finished(out, began, say, elapsed)


def _finished(out: dict[str, Any], began: float, say: Any, elapsed: Callable[[], str]) -> dict[str, Any]:
    out["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out["wall_s"] = round(time.monotonic() - began, 1)
    say(f"{elapsed()} done")
    return out


async def _scale(out: dict[str, Any], bootstrap: str, spec: ScaleSpec, say: Any, broker_pid: int | None,
                 elapsed: Callable[[], str]) -> dict[str, Any]:
    """The scale run into ``out["scale"]`` (or why it was not run), with the finishing fields."""
    cpu, why = cpulimit.budget(spec.cores)
    say(f"{elapsed()} scale: {spec.workers} workers vs 1, CPU quota: {why}")
    out["scale"] = (await scale_run(bootstrap, spec, cpu, say, broker_pid, elapsed) if cpu is not None
                    else {"spec": dict(spec.__dict__), "why": why})
    return out


def describe(name: str, run: Run) -> str:
    """One progress line: rate, CPU, rate per CPU-second, memory, and how the rate was taken.

    >>> describe("bare", Run("b", 1, 100, 2800, samples_per_s=1000.0, messages_per_s=35.7, cpu_cores=[0.5],
    ...                      samples_per_cpu_s=2000.0, rss_mb=[60.0], finished=True, wall_s=4.0))
    'bare                    1,000 samples/s        36 msg/s  cpu [0.5] (2,000/cpu-s)  rss [60.0]  finished  4 s'
    >>> describe("bare", Run("b", 1, 100, 2800, why="1 progress point(s)", finished=True, wall_s=2.0))
    'bare                n/a (1 progress point(s))  finished  2 s'
    """
    if run.samples_per_s is None:
        head = f"{name:18s}  n/a ({run.why})"
    else:
        per_cpu = f" ({run.samples_per_cpu_s:,.0f}/cpu-s)" if run.samples_per_cpu_s else ""
        waited = f" waited for a cpu {run.cpu_wait_cores}" if run.cpu_wait_cores else ""
        head = (f"{name:18s} {run.samples_per_s:>10,.0f} samples/s {run.messages_per_s or 0:>9,.0f} msg/s  "
                f"cpu {run.cpu_cores}{per_cpu}{waited}  rss {run.rss_mb}")
    how = "finished" if run.finished else "window" if run.samples_per_s is not None else "unfinished"
    return f"{head}  {how}{' (coarse fit)' if run.coarse and run.samples_per_s else ''}  {run.wall_s or 0:.0f} s"


def main() -> None:  # python -m benchmarks.lockbench (same as lockstep bench)
    from lockstep.commands.bench import main as bench_main

    sys.exit(bench_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
