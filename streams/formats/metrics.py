"""Turning one carried metric (name, labels, value, time, kind) into a native sample.

Shared by every metric carrier (Prometheus text, prometheus-kafka-adapter, Telegraf, Vector, OTLP):
the carrier parses its own envelope, this decides layer and source from the metric's profile
(:mod:`streams.formats.profiles`), skips documented non-values, and validates the sample.
"""

from __future__ import annotations

import math

from streams.formats.base import HEADER_LAYER, HEADER_SOURCE, Context
from streams.formats.lustre import fsname
from streams.formats.profiles import Profile, add_aliases, is_dcgm_blank, profile_for, resolve_source

SKIP_NON_FINITE = "non-finite value (NaN or Inf)"
SKIP_DCGM_BLANK = "DCGM blank value (field not supported or not found)"


class MetricEmitter:
    """Per-message emitter: the header lookups are done once."""

    __slots__ = ("_cache", "ctx", "forced", "layer_override", "source_fallback")

    def __init__(self, ctx: Context, forced: Profile | None = None) -> None:
        self.ctx = ctx
        self.forced = forced
        self.layer_override = ctx.header(HEADER_LAYER)
        self.source_fallback = ctx.header(HEADER_SOURCE) or ctx.default_source
        self._cache: dict[str, Profile] = {}

    def emit(self, record: str | None, ts: float, name: str, labels: dict[str, str], value: float,
             kind: str | None) -> bool:
        """Validate and append one sample; False when it was skipped or rejected."""
        ctx = self.ctx
        if not math.isfinite(value):
            ctx.skip(SKIP_NON_FINITE)
            return False
        profile = self._cache.get(name)
        if profile is None:
            profile = self._cache[name] = profile_for(name, self.forced)
        if profile.dcgm_blanks and is_dcgm_blank(value):
            ctx.skip(SKIP_DCGM_BLANK)
            return False
        if profile.pool_from_target:
            # The default source of a carrier is its record key (the OSS that was scraped), not the pool.
            target = labels.get("target")
            source = (self.ctx.header(HEADER_SOURCE) or (fsname(target) if target else None)
                      or resolve_source(labels, profile) or self.ctx.default_source)
        else:
            source = resolve_source(labels, profile) or self.source_fallback
        if not source:
            tried = ", ".join((*profile.source_labels, "host", "instance"))
            ctx.reject(record, f"{name}: no source: no source label ({tried}), no source header and no default source")
            return False
        if profile.aliases:
            labels = add_aliases(labels, profile)
        return ctx.sample(record, ts, self.layer_override or profile.layer, source, name, value, labels, kind)


def kind_from_name(name: str) -> str | None:
    """Without type information, the Prometheus naming convention: ``*_total`` is a counter.

    >>> kind_from_name("node_disk_reads_completed_total"), kind_from_name("DCGM_FI_DEV_GPU_UTIL")
    ('counter', None)
    """
    return "counter" if name.endswith("_total") else None
