"""The inventory index: jobs, nodes, GPUs, NIC -> switch-port links, switch tiers, storage pools,
and the scheduler's node states (drained, down, failed).

Every worker holds a full copy (the ``inventory`` topic is read whole by each worker). Jobs are
kept with their active interval in event time, so a question about time ``t`` is answered as of
``t`` whatever order the inventory and the telemetry arrived in. Ended jobs stay answerable for
``retention_s`` of event time after their end.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from models.inventory import HEALTHY_NODE_STATES, JobEvent, LinkEvent, NodeEvent, PoolEvent, SwitchEvent, SwitchPort
from models.timeutil import format_ts

InventoryEvent = JobEvent | LinkEvent | SwitchEvent | PoolEvent | NodeEvent


@dataclass(slots=True)
class JobInfo:
    """A job's record. ``gpus_unknown``: the scheduler did not say how many GPUs it holds; then
    ``gpus_per_node`` and ``gpus`` are 0 (so arithmetic over jobs stays defined) and
    :attr:`gpus_text` reads ``? GPUs``."""

    job_id: str
    nodes: list[str]
    gpus_per_node: int
    storage: list[str]
    start: float
    end: float | None = None
    state: str = "RUNNING"
    name: str | None = None
    gpus_unknown: bool = False
    #: When the scheduler first said the job no longer runs (COMPLETING, SUSPENDED, or its end); None while
    #: it runs. The job's RUNNING span is ``[start, running_until)``.
    running_until: float | None = None

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * len(self.nodes)

    @property
    def gpus_text(self) -> str:
        """``"32 GPUs"``, or ``"? GPUs"`` when the count is unknown.

        >>> JobInfo("j", ["a", "b"], 4, [], 0.0).gpus_text, JobInfo("j", ["a"], 0, [], 0.0, gpus_unknown=True).gpus_text
        ('8 GPUs', '? GPUs')
        """
        return "? GPUs" if self.gpus_unknown else f"{self.gpus} GPUs"

    def active_at(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass(frozen=True, slots=True)
class Link:
    node: str
    device: str
    port: str
    switch: str
    switch_port: str
    fabric: str
    #: Line rate in Gb/s (None: the topology source did not say).
    speed_gbps: float | None = None


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """The scheduler's latest word on a node (from a ``node`` inventory event)."""

    node: str
    state: str
    flags: tuple[str, ...]
    reason: str | None
    since: float | None
    ts: float

    @property
    def healthy(self) -> bool:
        return self.state in HEALTHY_NODE_STATES

    def describe(self) -> str:
        """One line for an alert: ``gpu007 is drained ("ECC memory error", since 2025-11-12T10:16:25Z)``."""
        parts = [f'"{self.reason}"'] if self.reason else []
        if self.since is not None:
            parts.append(f"since {format_ts(self.since)}")
        return f"{self.node} is {self.state}" + (f" ({', '.join(parts)})" if parts else "")


@dataclass(frozen=True, slots=True)
class Affected:
    """A job an entity can affect, and how (``node``, ``port``, ``switch``, ``spine``, ``pool``, ``job``, or
    ``pool_path``: a switch the job's storage pool's servers hang off)."""

    job_id: str
    relation: str


@dataclass
class InventoryIndex:
    retention_s: float = 7200.0
    jobs: dict[str, list[JobInfo]] = field(default_factory=lambda: defaultdict(list))
    links: dict[tuple[str, str, str], Link] = field(default_factory=dict)
    by_switch_port: dict[tuple[str, str], set[tuple[str, str, str]]] = field(default_factory=lambda: defaultdict(set))
    by_switch: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    uplinks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    tiers: dict[str, str] = field(default_factory=dict)
    #: switch -> port -> a port cabled to another switch: its peer and line rate (the switch event's ``ports``)
    switch_ports: dict[str, dict[str, SwitchPort]] = field(default_factory=dict)
    pool_switches: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    node_jobs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    node_leaves: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    node_states: dict[str, NodeStatus] = field(default_factory=dict)
    version: int = 0

    # -- updates --------------------------------------------------------------------------------
    def apply(self, event: InventoryEvent) -> None:
        """Fold one inventory event into the index (idempotent for repeated events)."""
        self.version += 1
        if isinstance(event, JobEvent):
            self._apply_job(event)
        elif isinstance(event, LinkEvent):
            key = (event.node, event.device, event.port)
            old = self.links.get(key)
            if old is not None:
                self.by_switch_port[(old.switch, old.switch_port)].discard(key)
                self.node_leaves[old.node].discard(old.switch)
            link = Link(event.node, event.device, event.port, event.switch, event.switch_port, event.fabric.value,
                        event.speed_gbps)
            self.links[key] = link
            self.by_switch_port[(link.switch, link.switch_port)].add(key)
            self.by_switch[link.switch].add(link.node)
            self.node_leaves[link.node].add(link.switch)
            self.tiers.setdefault(link.switch, "leaf")
        elif isinstance(event, SwitchEvent):
            self.tiers[event.switch] = event.tier
            self.uplinks[event.switch] = set(event.uplinks)
            self.switch_ports[event.switch] = dict(event.ports)  # the event is the switch's whole description
            for up in event.uplinks:
                self.tiers.setdefault(up, "spine" if event.tier == "leaf" else "core")
        elif isinstance(event, PoolEvent):
            self.pool_switches[event.pool] = set(event.switches)
        elif isinstance(event, NodeEvent):
            old_status = self.node_states.get(event.node)
            if old_status is None or old_status.ts <= event.ts:
                self.node_states[event.node] = NodeStatus(event.node, event.state, tuple(event.flags), event.reason,
                                                          event.since, event.ts)

    def _apply_job(self, event: JobEvent) -> None:
        history = self.jobs[event.job_id]
        current = history[-1] if history else None
        if event.state.active:
            if current is not None and current.end is None:
                # An update of a running job (nodes may change on resize).
                for node in set(current.nodes) - set(event.nodes):
                    self.node_jobs[node].discard(event.job_id)
                current.nodes = list(event.nodes)
                current.gpus_per_node = event.gpus_per_node or 0
                current.gpus_unknown = event.gpus_per_node is None
                current.storage = list(event.storage)
                if current.state == "RUNNING" and event.state.value != "RUNNING" and current.running_until is None:
                    current.running_until = event.ts  # it left RUNNING (COMPLETING, SUSPENDED)
                current.state = event.state.value
                current.start = min(current.start, event.ts)
            else:
                history.append(JobInfo(event.job_id, list(event.nodes), event.gpus_per_node or 0, list(event.storage),
                                       start=event.ts, state=event.state.value, name=event.name,
                                       gpus_unknown=event.gpus_per_node is None))
            for node in event.nodes:
                self.node_jobs[node].add(event.job_id)
        elif current is not None and current.end is None:
            current.end = event.ts
            current.state = event.state.value
            current.running_until = event.ts if current.running_until is None else current.running_until
        self._evict(event.ts)

    def _evict(self, now: float) -> None:
        for job_id in list(self.jobs):
            kept = [j for j in self.jobs[job_id] if j.end is None or j.end + self.retention_s > now]
            if len(kept) != len(self.jobs[job_id]):
                gone = {n for j in self.jobs[job_id] if j not in kept for n in j.nodes}
                still = {n for j in kept for n in j.nodes}
                for node in gone - still:
                    self.node_jobs[node].discard(job_id)
                if kept:
                    self.jobs[job_id] = kept
                else:
                    del self.jobs[job_id]

    # -- questions ------------------------------------------------------------------------------
    def job(self, job_id: str, t: float | None = None) -> JobInfo | None:
        """The job's record active at ``t`` (or its latest record when ``t`` is None)."""
        history = self.jobs.get(job_id)
        if not history:
            return None
        if t is None:
            return history[-1]
        for info in reversed(history):
            if info.active_at(t):
                return info
        return None

    def jobs_on_node(self, node: str, t: float | None) -> list[str]:
        """Jobs holding ``node`` at ``t`` (``None``: at any time still in the index)."""
        return sorted(j for j in self.node_jobs.get(node, ()) if (info := self.job(j, t)) and node in info.nodes)

    def nodes_behind_port(self, switch: str, port: str) -> list[str]:
        return sorted({key[0] for key in self.by_switch_port.get((switch, port), ())})

    def nodes_behind_switch(self, switch: str) -> list[str]:
        """Nodes cabled to ``switch``, or, for a spine/core, to any leaf below it."""
        direct = set(self.by_switch.get(switch, ()))
        if direct:
            return sorted(direct)
        below = {leaf for leaf, ups in self.uplinks.items() if switch in ups}
        nodes: set[str] = set()
        for leaf in below:
            nodes |= set(self.nodes_behind_switch(leaf))
        return sorted(nodes)

    def switch_port(self, switch: str, port: str) -> SwitchPort | None:
        """``switch``'s ``port`` as its switch event describes it (a port cabled to another switch), or None."""
        return self.switch_ports.get(switch, {}).get(port)

    def leaf_below(self, switch: str, port: str) -> str | None:
        """The leaf at the lower end of the switch-to-switch link on ``switch``'s ``port``: ``switch``
        itself for a leaf's uplink, the peer for a spine's port to a leaf; None when the inventory
        names no peer for the port, or neither end is a leaf (a spine-core link)."""
        described = self.switch_port(switch, port)
        if described is None or described.peer is None:
            return None
        for end in (switch, described.peer):
            if self.tiers.get(end) == "leaf":
                return end
        return None

    def nodes_behind_link(self, switch: str, port: str) -> list[str]:
        """The nodes whose traffic a switch port can carry: those cabled to it (a host's port), else
        those behind the leaf below its switch-to-switch link (:meth:`leaf_below`), else every node
        behind ``switch``."""
        if (switch, port) in self.by_switch_port:
            return self.nodes_behind_port(switch, port)
        leaf = self.leaf_below(switch, port)
        return self.nodes_behind_switch(leaf if leaf is not None else switch)

    def node_state(self, node: str) -> NodeStatus | None:
        """The scheduler's latest state of ``node``, or None when no ``node`` event named it."""
        return self.node_states.get(node)

    def unhealthy_nodes(self, layer: str, source: str, labels: dict[str, str]) -> list[NodeStatus]:
        """The drained, down or failed nodes an entity stands for or sits in front of.

        A host-side series (``gpu``, ``nccl``, ``nic``, ``host``) stands for its node; a switch
        port for the nodes cabled to it; a whole switch is not narrowed to nodes (its fault is not a
        node's). This is what an alert names when its root cause is a node or a port behind a node.

        >>> from models.inventory import LinkEvent, NodeEvent
        >>> inv = InventoryIndex()
        >>> inv.apply(LinkEvent(ts=1764502930, node="gpu7", device="mlx5_0", port="1", switch="leaf1", switch_port="9"))
        >>> inv.apply(NodeEvent(ts=1764502930, node="gpu7", state="drained", reason="ECC memory error"))
        >>> [s.describe() for s in inv.unhealthy_nodes("switch", "leaf1", {"port": "9"})]
        ['gpu7 is drained ("ECC memory error")']
        """
        if layer in ("gpu", "nccl", "nic", "host"):
            nodes = [source]
        elif layer == "switch" and labels.get("port") is not None:
            nodes = self.nodes_behind_port(source, labels["port"])
        else:
            return []
        return [st for n in nodes if (st := self.node_states.get(n)) is not None and not st.healthy]

    def node_state_evidence(self, layer: str, source: str, labels: dict[str, str]) -> list[dict[str, object]]:
        """:meth:`unhealthy_nodes` as JSON-ready evidence for an alert whose root cause is
        ``layer``/``source``/``labels``: ``[{"node", "state", "reason", "since", "text"}]`` (empty when
        every node involved is healthy or unknown to the scheduler feed)."""
        return [{"node": st.node, "state": st.state, "reason": st.reason,
                 "since": format_ts(st.since) if st.since is not None else None, "text": st.describe()}
                for st in self.unhealthy_nodes(layer, source, labels)]

    def leaves_of(self, nodes: list[str]) -> set[str]:
        """The leaf switches the nodes are cabled to."""
        out: set[str] = set()
        for node in nodes:
            out |= self.node_leaves.get(node, set())
        return out

    def affected_jobs(self, layer: str, source: str, labels: dict[str, str], t: float | None) -> list[Affected]:
        """The jobs a series of ``layer``/``source``/``labels`` can affect at time ``t``.

        With ``t=None`` the answer covers every job still in the index (callers cache it per series
        and check each job's activity at the sample's time with :meth:`job`).
        """
        if layer == "step":
            job_id = labels.get("job_id")
            return [Affected(job_id, "job")] if job_id else []
        if layer in ("gpu", "nccl", "nic", "host"):
            job_id = labels.get("job_id")
            if job_id and self.job(job_id, t):
                return [Affected(job_id, "node")]
            return [Affected(j, "node") for j in self.jobs_on_node(source, t)]
        if layer == "switch":
            return self._with_pool_paths(self._fabric_jobs(source, labels.get("port"), t), source,
                                         labels.get("port"), t)
        if layer == "storage":
            return [Affected(j.job_id, "pool") for j in self.active_jobs(t) if source in j.storage]
        return []

    def _fabric_jobs(self, switch: str, port: str | None, t: float | None) -> list[Affected]:
        """The jobs whose training traffic crosses ``switch`` (or its ``port``)."""
        if port is not None and (switch, port) in self.by_switch_port:
            return self._jobs_of_nodes(self.nodes_behind_port(switch, port), t, "port")
        leaf = self.leaf_below(switch, port) if port is not None else None
        if leaf is not None:
            # A leaf-spine link carries the traffic that leaves the leaf: its jobs that span leaves.
            return self._spanning(self._jobs_of_nodes(self.nodes_behind_switch(leaf), t, "uplink"), t)
        nodes = self.nodes_behind_switch(switch)
        if self.tiers.get(switch, "leaf") == "leaf" and switch in self.by_switch:
            return self._jobs_of_nodes(nodes, t, "switch")
        # A spine carries traffic only for jobs that span more than one leaf below it.
        return self._spanning(self._jobs_of_nodes(nodes, t, "spine"), t)

    def _spanning(self, affected: list[Affected], t: float | None) -> list[Affected]:
        """The jobs of ``affected`` whose nodes are on more than one leaf."""
        return [a for a in affected if (info := self.job(a.job_id, t)) and len(self.leaves_of(info.nodes)) > 1]

    def storage_paths(self, switch: str, port: str | None, t: float | None) -> list[str]:
        """The pools whose servers hang off ``switch`` (and ``port``, when given), sorted.

        A leaf in a pool's ``switches`` is where the pool's servers hang off: its ports carry the pool's
        traffic, except a port cabled to a node that runs a job at ``t`` (a compute node's downlink is
        that node's, mapped to its jobs). Spines and cores in the list are not narrowed to a pool: they
        carry every job's traffic, and keep the spine rule.

        >>> from models.inventory import JobEvent, LinkEvent, PoolEvent, SwitchEvent
        >>> inv = InventoryIndex()
        >>> inv.apply(PoolEvent(ts=1764502930, pool="lustre-a", switches=["stor-leaf01", "spine01"]))
        >>> inv.apply(SwitchEvent(ts=1764502930, switch="stor-leaf01", tier="leaf", uplinks=["spine01"]))
        >>> inv.apply(LinkEvent(ts=1764502930, node="oss01", device="mlx5_0", port="1", switch="stor-leaf01",
        ...                     switch_port="1"))
        >>> inv.apply(JobEvent(ts=1764502930, job_id="a", state="RUNNING", nodes=["gpu1"], gpus_per_node=8,
        ...                    storage=["lustre-a"]))
        >>> inv.storage_paths("stor-leaf01", "1", None), inv.storage_paths("spine01", None, None)
        (['lustre-a'], [])
        >>> [(x.job_id, x.relation) for x in inv.affected_jobs("switch", "stor-leaf01", {"port": "1"}, None)]
        [('a', 'pool_path')]
        """
        if self.tiers.get(switch, "leaf") != "leaf":
            return []
        pools = sorted(p for p, switches in self.pool_switches.items() if switch in switches)
        behind = self.nodes_behind_port(switch, port) if pools and port is not None else []
        if any(self.jobs_on_node(node, t) for node in behind):
            return []
        return pools

    def _with_pool_paths(self, fabric: list[Affected], switch: str, port: str | None,
                         t: float | None) -> list[Affected]:
        """``fabric`` plus every job using a pool whose servers hang off ``switch`` (relation ``pool_path``)."""
        pools = self.storage_paths(switch, port, t)
        if not pools:
            return fabric
        seen = {a.job_id for a in fabric}
        extra = sorted({info.job_id for info in self._jobs_of_any_time(t) if set(info.storage) & set(pools)} - seen)
        return [*fabric, *(Affected(j, "pool_path") for j in extra)]

    def _jobs_of_any_time(self, t: float | None) -> list[JobInfo]:
        """The jobs active at ``t``; with ``t=None`` every record still in the index."""
        if t is not None:
            return self.active_jobs(t)
        return [info for history in self.jobs.values() for info in history]

    def _jobs_of_nodes(self, nodes: list[str], t: float | None, relation: str) -> list[Affected]:
        jobs: set[str] = set()
        for node in nodes:
            jobs.update(self.jobs_on_node(node, t))
        return [Affected(j, relation) for j in sorted(jobs)]

    def active_jobs(self, t: float | None) -> list[JobInfo]:
        out = []
        for job_id in sorted(self.jobs):
            info = self.job(job_id, t)
            if info is not None:
                out.append(info)
        return out

    def neighbours(
        self, job_id: str, layer: str, source: str, labels: dict[str, str], t: float
    ) -> list[tuple[str, int, str]]:
        """Other jobs exposed to the same entity: ``(job_id, gpus, relation)``.

        A switch port's neighbours are the other jobs behind the same port (a host's port) or whose
        traffic crosses the same leaf-spine link (``same_link``: a port the switch event describes,
        :meth:`leaf_below`), then those whose traffic crosses the same switch (every job behind a leaf;
        for a spine or core only the jobs that span leaves, as :meth:`affected_jobs` maps a spine),
        then (a switch a pool's servers hang off) the jobs using that pool; a pool's are the other
        jobs using the pool.
        """
        seen: dict[str, str] = {}
        if layer == "switch":
            port = labels.get("port")
            if port is not None:
                if (source, port) in self.by_switch_port:
                    for a in self._jobs_of_nodes(self.nodes_behind_port(source, port), t, "same_port"):
                        seen.setdefault(a.job_id, "same_port")
                elif self.leaf_below(source, port) is not None:
                    for a in self._fabric_jobs(source, port, t):
                        seen.setdefault(a.job_id, "same_link")
            for a in self._fabric_jobs(source, None, t):
                seen.setdefault(a.job_id, "same_switch")
            pools = set(self.storage_paths(source, port, t))
            for info in self.active_jobs(t) if pools else ():
                if pools & set(info.storage):
                    seen.setdefault(info.job_id, "same_pool_path")
        elif layer == "nic":
            link = self.links.get((source, labels.get("device", ""), labels.get("port", "1")))
            if link is not None:
                for a in self._jobs_of_nodes(self.nodes_behind_switch(link.switch), t, "same_switch"):
                    seen.setdefault(a.job_id, "same_switch")
        elif layer == "storage":
            for info in self.active_jobs(t):
                if source in info.storage:
                    seen.setdefault(info.job_id, "same_pool")
        elif layer in ("gpu", "host", "nccl"):
            for j in self.jobs_on_node(source, t):
                seen.setdefault(j, "same_node")
        out = []
        for other, relation in sorted(seen.items()):
            if other == job_id:
                continue
            other_info = self.job(other, t)
            out.append((other, other_info.gpus if other_info else 0, relation))
        return out

    def paths(self, job_id: str, t: float | None = None) -> list[dict[str, object]]:
        """NIC -> leaf port -> spines for each node of the job."""
        info = self.job(job_id, t)
        if info is None:
            return []
        out: list[dict[str, object]] = []
        nodes = set(info.nodes)
        for link in sorted(self.links.values(), key=lambda lk: (lk.node, lk.device, lk.port)):
            if link.node in nodes:
                out.append({"node": link.node, "device": link.device, "port": link.port, "switch": link.switch,
                            "switch_port": link.switch_port, "fabric": link.fabric,
                            "spines": sorted(self.uplinks.get(link.switch, ()))})
        return out

    def fabric_switches(self, job_id: str, t: float | None = None) -> set[str]:
        """Every switch the job's training traffic may cross (leaves and their uplinks)."""
        info = self.job(job_id, t)
        if info is None:
            return set()
        leaves = self.leaves_of(info.nodes)
        out = set(leaves)
        for leaf in leaves:
            out |= self.uplinks.get(leaf, set())
        return out
