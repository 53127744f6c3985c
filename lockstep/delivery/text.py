"""Text the payload builders share: cutting to a published limit, and the timeline as a compact table."""

from __future__ import annotations

from typing import Any


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``marker`` when cut.

    >>> truncate("abcdef", 4)
    'abc…'
    """
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


def timeline_table(timeline: list[dict[str, Any]], rows: int = 12) -> str:
    """The timeline as a compact fixed-width table (UTC time, layer, where, metric, value vs p50).

    >>> print(timeline_table([{"ts": "2025-11-30T11:42:10.000Z", "layer": "switch", "source": "leaf03",
    ...   "labels": {"port": "17"}, "metric": "SymbolErrorCounter", "value": 120.0, "p50": 0.0, "entities": 1}]))
    time     layer   where               metric                      value      p50
    11:42:10 switch  leaf03 port=17      SymbolErrorCounter            120        0
    """
    lines = [f"{'time':8} {'layer':7} {'where':19} {'metric':27} {'value':>5} {'p50':>8}"]
    for e in timeline[:rows]:
        labels = " ".join(f"{k}={v}" for k, v in sorted((e.get("labels") or {}).items()))
        where = f"{e.get('source', '')} {labels}".strip()
        if e.get("entities", 1) > 1:
            where += f" +{e['entities'] - 1}"
        p50 = e.get("p50")
        lines.append(f"{str(e.get('ts', ''))[11:19]:8} {truncate(str(e.get('layer', '')), 7):7} "
                     f"{truncate(where, 19):19} {truncate(str(e.get('metric', '')), 27):27} "
                     f"{_num(e.get('value')):>5} {_num(p50):>8}")
    if len(timeline) > rows:
        lines.append(f"… {len(timeline) - rows} more")
    return "\n".join(lines)


def _num(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.0f}" if abs(v) >= 100 or v == int(v) else f"{v:.3g}"
