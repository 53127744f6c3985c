"""The fleet page in headless Chromium, against a live worker that replayed the seed incident: the top
offenders table and the leaf x time heatmap hold the ledger's numbers (the seed slowdown's cost, by the
formula from the alert), the fabric-health table lists leaf03 port 17 as recovered, and the
before/after table shows the step time's change with its interval. Saves
``docs/img/fleet.png`` (the README shows it). Without chromium this test FAILS, as the timeline
page's does. The page's text escaping is checked as the timeline page's is."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.web import WEB_ROOT

from .cdp import Chromium, find_chromium
from .client import get
from .conftest import LiveWorker
from .test_web_capacity import seed_slowdown

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "fleet.png"

DRAWN = """(() => ({
  offenders: [...document.querySelectorAll('#offenders tr[data-id]')].map((tr) => ({
    kind: tr.dataset.kind, id: tr.dataset.id, shown: tr.querySelector('[data-role=gpu-hours]').textContent,
    fixed: tr.querySelector('.pill').textContent })),
  total: document.querySelector('#offenders-total').textContent,
  heat: [...document.querySelectorAll('#heatmap g[data-role=heat-row]')].map((g) => ({
    leaf: g.dataset.leaf, cells: g.querySelectorAll('rect.cell').length,
    hot: [...g.querySelectorAll('rect.hot')].map((r) => [r.dataset.start, Number(r.dataset.value)]),
    label: [...document.querySelectorAll('#heatmap text.row-label')].map((t) => t.textContent) })),
  health: [...document.querySelectorAll('#health tr[data-id]')].map((tr) => [tr.dataset.kind, tr.dataset.id,
                                                                              tr.dataset.state]),
  drain: document.querySelector('#drain').textContent,
  effects: [...document.querySelectorAll('#effects tr[data-alert]')].map((tr) => [tr.dataset.alert,
    tr.querySelector('[data-role=step-change]')?.textContent,
    tr.querySelector('[data-role=cause-change]')?.textContent]),
  msg: document.querySelector('#fleet-msg').textContent,
}))()"""


async def _look(url: str, binary: str) -> tuple[dict[str, Any], list[str], bytes]:
    async with Chromium(binary) as browser:
        await browser.viewport(1500, 900)
        await browser.navigate(f"{url}/fleet?window=1d")
        await browser.wait_for("document.body.dataset.loaded === 'true' && "
                               "!!document.querySelector('#heatmap rect.hot')")
        drawn = await browser.evaluate(DRAWN)
        height = await browser.evaluate("document.documentElement.scrollHeight")
        await browser.viewport(1500, int(height))
        await asyncio.sleep(0.3)  # one frame for the resized viewport before the screenshot
        png = await browser.screenshot(SCREENSHOT)
        return drawn, browser.errors, png


@pytest.mark.broker
@pytest.mark.browser
@pytest.mark.timeout(1200)
def test_the_fleet_page_shows_the_seed_incidents_cost_per_entity_and_on_the_heatmap(seed_worker: LiveWorker) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.fail("headless Chromium not found: install Debian's chromium (`apt-get install -y chromium`) or set "
                    "LOCKSTEP_CHROMIUM to its path")
    _, cost = seed_slowdown(seed_worker)
    drawn, errors, png = asyncio.run(_look(seed_worker.url, binary))
    assert errors == []  # no JavaScript exception, no console error (a CSP violation would be one)
    assert drawn["msg"] == ""
    # the offenders: the port and its leaf, each with the incident's whole cost, fixed
    assert {(o["kind"], o["id"]) for o in drawn["offenders"]} == {("port", "leaf03:17"), ("leaf", "leaf03")}
    for o in drawn["offenders"]:
        assert o["shown"] == f"{cost / 3600:.2f}" and o["fixed"] == "fixed"
    assert drawn["total"] == f"{cost / 3600:.2f} GPU-hours in 1 incident"
    # the heatmap: one row (leaf03), the hours of the last day, the cost in the incident's hour(s)
    api = get(seed_worker.url, "/capacity/heatmap?by=leaf&window=1d&bucket=1h&limit=30").json
    (row,) = drawn["heat"]
    assert row["leaf"] == "leaf03" and row["label"] == ["leaf03"] and row["cells"] == len(api["starts"])
    hot_api = [[s, v] for s, v in zip(api["starts_iso"], api["rows"][0]["values"], strict=True) if v > 0]
    assert row["hot"] == hot_api and sum(v for _, v in row["hot"]) == pytest.approx(cost / 3600, abs=1e-3)
    assert row["hot"][0][0][:13] == "2025-11-30T11"  # the seed incident's hour
    # fabric health: the port and its leaf recovered, nothing to drain
    assert drawn["health"] == [["port", "leaf03:17", "recovered"], ["leaf", "leaf03", "recovered"]]
    assert drawn["drain"] == "nothing to drain"
    # before and after: the step time's change of the mean with its interval, as /capacity/effects says
    (inc,) = get(seed_worker.url, "/capacity/effects?window=1d&limit=10").json["incidents"]
    ((alert_id, step_change, cause_change),) = drawn["effects"]
    st = inc["step_time"]
    assert alert_id == inc["alert_id"] and step_change.startswith(f"{st['change']:.3f} ± ") and "%)" in step_change
    assert cause_change.startswith(f"{inc['cause']['change']:.2f} ± ")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and SCREENSHOT.stat().st_size > 20_000


def test_the_fleet_page_is_served_with_the_pages_csp_and_linked_from_the_main_page(seed_worker: LiveWorker) -> None:
    r = get(seed_worker.url, "/fleet")
    assert r.status == 200 and r.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in r.headers["content-security-policy"] and "/static/fleet.js" in r.body.decode()
    assert 'href="/fleet"' in (WEB_ROOT / "index.html").read_text()
    assert get(seed_worker.url, "/static/fleet.js").status == 200
    assert get(seed_worker.url, "/fleet?x=1").status == 400


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_fleet_page_shows_control_and_bidi_characters_escaped() -> None:
    source = (WEB_ROOT / "fleet.js").read_text()
    start = source.index("const UNSAFE")
    end = source.index("function el(")
    script = source[start:end] + """
const cases = ["leaf\\u001b[31mred", "a\\u202eevil", "x\\u2066y\\u2069", "tab\\there", "del\\u007f", "c1\\u009b",
               "plain ü 日本"];
process.stdout.write(JSON.stringify(cases.map(visible)));
"""
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=30).stdout
    assert orjson.loads(out) == ["leaf\\u001b[31mred", "a\\u202eevil", "x\\u2066y\\u2069", "tab\\u0009here",
                                 "del\\u007f", "c1\\u009b", "plain ü 日本"]
    # Every text the page writes goes through visible(): no raw textContent, text node or title; no HTML parsing.
    body = source[end:]
    assert "textContent = visible(" in body and "createTextNode(visible(" in body
    assert all(line.split("textContent = ", 1)[1].startswith("visible(")
               for line in body.splitlines() if "textContent = " in line)
    for never in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert never not in source
    html = (WEB_ROOT / "fleet.html").read_text()
    assert "<script>" not in html and " style=" not in html and not re.search(r"\son[a-z]+=", html)
