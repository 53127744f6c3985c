"""Inventory contracts: which job runs on which nodes, and which NIC hangs off which switch port.

Inventory events are rare and precious, so they are validated with the full pydantic models.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

import hostlist
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from models.timeutil import parse_ts

MAX_NAME_LEN = 256
MAX_NODES_PER_JOB = 100_000


class JobState(StrEnum):
    """Job states as Slurm spells them (``squeue``/``sacct``)."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REQUEUED = "REQUEUED"

    @property
    def active(self) -> bool:
        """True while the job holds its nodes (it is in the inventory)."""
        return self in _ACTIVE


_ACTIVE = {JobState.RUNNING, JobState.CONFIGURING, JobState.COMPLETING, JobState.SUSPENDED}


class Fabric(StrEnum):
    INFINIBAND = "infiniband"
    ROCE = "roce"


def expand_nodes(value: str | list[str]) -> list[str]:
    """Expand a Slurm hostlist (``"gpu[001-004],login1"``) or a list of names into node names.

    >>> expand_nodes("gpu[001-003]")
    ['gpu001', 'gpu002', 'gpu003']
    >>> expand_nodes(["a", "b[1-2]"])
    ['a', 'b1', 'b2']
    """
    parts = [value] if isinstance(value, str) else list(value)
    nodes: list[str] = []
    for part in parts:
        if not isinstance(part, str):
            raise ValueError("nodes must be a hostlist string or a list of strings")
        try:
            nodes.extend(hostlist.expand_hostlist(part))
        except hostlist.BadHostlist as exc:
            raise ValueError(f"bad hostlist {part!r}: {exc}") from None
        if len(nodes) > MAX_NODES_PER_JOB:
            raise ValueError(f"more than {MAX_NODES_PER_JOB} nodes")
    return nodes


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN)]


class JobEvent(BaseModel):
    """A job's allocation. ``nodes`` arrives as a hostlist or list and is stored expanded.

    ``gpus_per_node`` is ``null`` when the scheduler's record does not say how many GPUs the job
    holds ("unknown" is not 0: a job reported with 0 GPUs is a CPU job).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["job"] = "job"
    ts: float
    job_id: Name
    state: JobState
    nodes: list[Name]
    gpus_per_node: int | None = Field(ge=0, le=64)
    storage: list[Name] = Field(default_factory=list)
    name: str | None = Field(default=None, max_length=MAX_NAME_LEN)
    user: str | None = Field(default=None, max_length=MAX_NAME_LEN)

    @field_validator("ts", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> float:
        return parse_ts(value)

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> list[str]:
        if not isinstance(value, str | list):
            raise ValueError("nodes must be a Slurm hostlist string or a list of names")
        return expand_nodes(value)

    @property
    def gpus(self) -> int | None:
        """The job's GPU count, ``None`` when unknown."""
        return None if self.gpus_per_node is None else self.gpus_per_node * len(self.nodes)


class LinkEvent(BaseModel):
    """One host NIC port cabled to one switch port (the leaf tier).

    ``speed_gbps`` is the link's line rate in Gb/s when the topology source says it (``ibnetdiscover``
    prints width and speed, ``4x HDR`` = 200); ``null`` when unknown. The fabric report
    (:mod:`streams.fabric`) measures utilisation against it.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["link"] = "link"
    ts: float
    node: Name
    device: Name
    port: Name
    switch: Name
    switch_port: Name
    fabric: Fabric = Fabric.INFINIBAND
    speed_gbps: float | None = Field(default=None, gt=0, le=100_000)

    @field_validator("ts", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> float:
        return parse_ts(value)

    @field_validator("port", "switch_port", mode="before")
    @classmethod
    def _port_text(cls, value: Any) -> Any:
        # Ports are names; a JSON integer is the one coercion we accept because exporters disagree.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value


class SwitchPort(BaseModel):
    """A switch port cabled to another switch: the switch at its other end and the link's line rate,
    each when the topology source says it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    peer: Name | None = None
    speed_gbps: float | None = Field(default=None, gt=0, le=100_000)


class SwitchEvent(BaseModel):
    """A switch's place in the tiers: a leaf's uplinks (its spines), a spine's core.

    ``ports`` describes the switch's ports cabled to other switches (a leaf's uplinks, a spine's
    ports to its leaves and its core), by port: ``peer``, the switch at the other end, and
    ``speed_gbps``, the link's line rate, each when the topology source says it (``ibnetdiscover``
    and ``iblinkinfo`` print every switch-to-switch cable with both ends and its width and speed).
    Correlation narrows an anomaly on such a port to the jobs whose traffic crosses that link (the
    leaf below it: its jobs that span leaves), and the fabric report measures its utilisation against
    the line rate. A port a ``link`` event names (a host's) is described by the link instead. An event
    is the switch's whole description: its ``ports`` replace those an earlier event gave.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["switch"] = "switch"
    ts: float
    switch: Name
    tier: Literal["leaf", "spine", "core"]
    uplinks: list[Name] = Field(default_factory=list)
    ports: dict[Name, SwitchPort] = Field(default_factory=dict, max_length=4096)

    @field_validator("ts", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> float:
        return parse_ts(value)

    @field_validator("ports", mode="before")
    @classmethod
    def _port_names(cls, value: Any) -> Any:
        # JSON object keys are strings already; a Python caller's integer port is coerced as ports are.
        if isinstance(value, dict):
            return {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v for k, v in value.items()}
        return value


class PoolEvent(BaseModel):
    """A storage pool and the switches its servers hang off (for "storage via network")."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["pool"] = "pool"
    ts: float
    pool: Name
    switches: list[Name] = Field(default_factory=list)
    fs_type: str | None = Field(default=None, max_length=64)

    @field_validator("ts", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> float:
        return parse_ts(value)


#: Node states Lockstep distinguishes (from Slurm's base state and flags, see :class:`NodeEvent`).
NodeStateName = Literal["down", "fail", "failing", "drained", "draining", "alloc", "mixed", "idle", "unknown"]
#: States in which a node runs jobs normally.
HEALTHY_NODE_STATES = frozenset({"alloc", "mixed", "idle"})


class NodeEvent(BaseModel):
    """A node's scheduler state: is it drained, down or failed, why, and since when.

    ``state`` folds Slurm's base state and flags into one word: ``down`` (DOWN), ``fail`` (FAIL flag
    on an idle/down node), ``failing`` (FAIL on a busy node), ``drained`` (DRAIN on an idle node),
    ``draining`` (DRAIN on a busy node), else ``alloc``, ``mixed``, ``idle`` or ``unknown``.
    ``flags`` keeps Slurm's words (``["IDLE", "DRAIN"]``); ``reason`` is the administrator's or
    slurmctld's text; ``since`` when the reason was set (Unix seconds), when known.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["node"] = "node"
    ts: float
    node: Name
    state: NodeStateName
    flags: list[Annotated[str, Field(max_length=64)]] = Field(default_factory=list, max_length=32)
    reason: str | None = Field(default=None, max_length=MAX_NAME_LEN)
    since: float | None = None

    @field_validator("ts", "since", mode="before")
    @classmethod
    def _ts(cls, value: Any) -> float | None:
        return None if value is None else parse_ts(value)

    @property
    def healthy(self) -> bool:
        return self.state in HEALTHY_NODE_STATES


AnyInventoryEvent = JobEvent | LinkEvent | SwitchEvent | PoolEvent | NodeEvent
InventoryEvent = Annotated[AnyInventoryEvent, Field(discriminator="kind")]
inventory_adapter: TypeAdapter[AnyInventoryEvent] = TypeAdapter(InventoryEvent)


def inventory_key(event: AnyInventoryEvent) -> str:
    """The compaction key of an inventory event: the latest event per key is the current state."""
    if isinstance(event, JobEvent):
        return f"job:{event.job_id}"
    if isinstance(event, LinkEvent):
        return f"link:{event.node}:{event.device}:{event.port}"
    if isinstance(event, SwitchEvent):
        return f"switch:{event.switch}"
    if isinstance(event, NodeEvent):
        return f"node:{event.node}"
    return f"pool:{event.pool}"
