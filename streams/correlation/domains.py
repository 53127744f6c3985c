"""The bottleneck domain of a job slowdown, from its first mover and the rest of its evidence.

The rules are a table read top to bottom; the first row whose condition holds gives the domain and
the reason (docs/correlation.md shows each row with its timeline). Order is meaning: "storage via
network" is asked before "network", and "data preparation, but network or storage moved too" before
"dataloader".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from models.alerts import Domain
from streams.correlation.evidence import NETWORK_MEANINGS, labels_text
from streams.correlation.timeline import Episode
from streams.inventory import InventoryIndex


@dataclass(frozen=True)
class Facts:
    """What the domain rules look at: the first mover (``None``: nothing moved first) and all causes."""

    first: Episode | None
    causes: Sequence[Episode]
    inventory: InventoryIndex
    job_id: str
    onset: float

    @property
    def layer(self) -> str:
        return str(self.first.start["layer"]) if self.first else ""

    @property
    def meaning(self) -> str:
        return str(self.first.start["meaning"]) if self.first else ""

    @property
    def source(self) -> str:
        return str(self.first.start["source"]) if self.first else ""

    @property
    def where(self) -> str:
        return f"{self.source} {labels_text(self.first.start['labels'])}".strip() if self.first else ""

    @cached_property
    def fabric(self) -> list[Episode]:
        """Causes that are fabric errors (switch or NIC, a network meaning)."""
        return [c for c in self.causes if c.start["layer"] in ("switch", "nic")
                and c.start["meaning"] in NETWORK_MEANINGS]

    @cached_property
    def slow_pools(self) -> list[str]:
        return sorted({c.start["source"] for c in self.causes if c.start["layer"] == "storage"
                       and c.start["meaning"] == "latency"})

    @cached_property
    def pool_on_first_switch(self) -> str | None:
        """The first slow pool whose path holds the switch that moved first."""
        if self.layer != "switch":
            return None
        return next((p for p in self.slow_pools if self.source in self.inventory.pool_switches.get(p, set())), None)

    @cached_property
    def pool_path_errors(self) -> list[str]:
        """Switches on the first-moving pool's path that took errors, else (when the fabric moved at all)
        the pool's switches the job shares; empty when neither."""
        pool_switches = self.inventory.pool_switches.get(self.source, set())
        on_path = sorted({c.start["source"] for c in self.fabric if c.start["layer"] == "switch"
                          and c.start["source"] in pool_switches})
        shared = pool_switches & self.inventory.fabric_switches(self.job_id, self.onset)
        if on_path:
            return on_path
        return sorted(shared) if shared and self.fabric else []

    @cached_property
    def moved_too(self) -> list[str]:
        """Every fabric entity and pool that moved besides the first mover, as the reason names them
        (``switch leaf1 port 12``, ``nic n3 device=mlx5_0``, ``pool lustre``), fabric first."""
        fabric = [f"{c.start['layer']} {c.start['source']} {labels_text(c.start['labels'])}".strip()
                  for c in self.fabric if c is not self.first]
        return [*dict.fromkeys(sorted(fabric)), *(f"pool {p}" for p in self.slow_pools)]

    @property
    def fabric_first(self) -> bool:
        return self.layer in ("switch", "nic") and self.meaning in NETWORK_MEANINGS

    @property
    def data_preparation_first(self) -> bool:
        return (self.layer == "host" and self.meaning == "utilisation") or self.meaning == "loader_wait"


@dataclass(frozen=True)
class DomainRule:
    name: str
    when: Callable[[Facts], bool]
    domain: Domain
    reason: Callable[[Facts], str]


DOMAIN_RULES: tuple[DomainRule, ...] = (
    DomainRule("nothing moved first", lambda f: f.first is None, Domain.UNKNOWN,
               lambda f: "no component moved before the slowdown"),
    DomainRule("storage via network: a switch on the pool's path first",
               lambda f: f.fabric_first and f.pool_on_first_switch is not None, Domain.NETWORK,
               lambda f: (f"storage via network: {f.where} on pool {f.pool_on_first_switch}'s path moved first "
                          f"({f.meaning}) and {f.pool_on_first_switch}'s latency rose with it")),
    DomainRule("network", lambda f: f.fabric_first, Domain.NETWORK,
               lambda f: f"{f.layer} {f.where} {f.meaning} moved first"),
    DomainRule("storage via network: the pool first, its path erring",
               lambda f: f.layer == "storage" and bool(f.pool_path_errors), Domain.NETWORK,
               lambda f: (f"storage via network: pool {f.source}'s latency moved first while {f.pool_path_errors} "
                          "on its path took errors; investigate the storage network")),
    DomainRule("storage", lambda f: f.layer == "storage", Domain.STORAGE,
               lambda f: f"pool {f.source} {f.meaning} moved first"),
    DomainRule("compute: a GPU fault", lambda f: f.layer == "gpu" and f.meaning in ("gpu_fault", "throttle",
                                                                                      "temperature"),
               Domain.COMPUTE, lambda f: f"{f.where} {f.meaning} moved first"),
    DomainRule("data preparation, but network or storage moved too",
               lambda f: f.data_preparation_first and bool(f.fabric or f.slow_pools), Domain.UNKNOWN,
               lambda f: (f"data preparation on {f.source} saturated first, but {', '.join(f.moved_too)} moved too")),
    DomainRule("dataloader", lambda f: f.data_preparation_first, Domain.DATALOADER,
               lambda f: f"data preparation on {f.source} saturated first"),
    DomainRule("otherwise", lambda f: True, Domain.UNKNOWN,
               lambda f: f"{f.layer} {f.meaning} moved first; no fabric, storage or GPU fault evidence"),
)


def domain_of(facts: Facts) -> tuple[Domain, str]:
    """``(domain, reason)`` of the first row of :data:`DOMAIN_RULES` that holds."""
    for rule in DOMAIN_RULES:
        if rule.when(facts):
            return rule.domain, rule.reason(facts)
    raise AssertionError("the last domain rule always holds")
