"""The timeline page in headless Chromium: lanes, bands, anomalies, the first mover and the incident
window are drawn for the seed incident; the seven answers and the alert are beside them. Saves
``artifacts/timeline.png``. Without chromium this test FAILS (it is part of the gate)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streams.lanes import LANE_ORDER

from .cdp import Chromium, find_chromium
from .conftest import LiveWorker

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(1200)]

ARTIFACT = Path(__file__).resolve().parents[2] / "artifacts" / "timeline.png"

DRAWN = """(() => {
  const lanes = [...document.querySelectorAll('#timeline g.lane')].map((g) => ({
    lane: g.dataset.lane, hasData: g.dataset.hasData,
    p50: (g.querySelector('path.p50')?.getAttribute('d') || '').length,
    band: (g.querySelector('path.band')?.getAttribute('d') || '').length,
    value: g.querySelector('[data-role=lane-value]')?.textContent || '' }));
  const fm = document.querySelector('#timeline [data-role=first-mover]');
  const line = fm?.querySelector('line');
  const inc = document.querySelector('#timeline [data-role=incident] rect');
  const ann = [...document.querySelectorAll('#answers li')].map((li) => li.textContent);
  return {
    lanes,
    firstMover: fm && {source: fm.dataset.source, port: fm.dataset.port, lane: fm.dataset.lane,
                       domain: fm.dataset.domain, x: Number(line.getAttribute('x1')), label: fm.textContent},
    incident: inc && {x: Number(inc.getAttribute('x')), width: Number(inc.getAttribute('width'))},
    anomalies: [...document.querySelectorAll('#timeline [data-role=anomaly]')].map((a) => a.dataset.lane),
    answers: ann,
    jobs: [...document.querySelectorAll('#jobs li')].map((li) => [li.dataset.job, li.dataset.status]),
    alerts: [...document.querySelectorAll('#alerts tr[data-alert]')].length,
    title: document.querySelector('#job-title').textContent,
  };
})()"""


async def _look(url: str, binary: str) -> tuple[dict[str, Any], list[str], bytes]:
    async with Chromium(binary) as browser:
        await browser.viewport(1600, 1000)
        await browser.navigate(f"{url}/jobs/llm-70b/timeline")
        await browser.wait_for("document.body.dataset.loaded === 'true' && "
                               "!!document.querySelector('#timeline [data-role=first-mover]')")
        drawn = await browser.evaluate(DRAWN)
        height = await browser.evaluate("document.documentElement.scrollHeight")
        await browser.viewport(1600, int(height))
        await asyncio.sleep(0.3)
        png = await browser.screenshot(ARTIFACT)
        # Point into the incident: a cursor crosses every lane and the tooltip lists each lane at that second.
        where = await browser.evaluate("""(() => {
          const svg = document.querySelector('#timeline'); const r = svg.getBoundingClientRect();
          const k = r.width / svg.viewBox.baseVal.width;
          const fm = Number(svg.querySelector('[data-role=first-mover] line').getAttribute('x1'));
          const step = svg.querySelector('g.lane[data-lane=step_time] text.lane-title').getBoundingClientRect();
          return [r.left + (fm + 110) * k, step.top + 4]; })()""")
        await browser.mouse_move(where[0], where[1])
        await browser.wait_for("!document.querySelector('#tip').hidden")
        drawn["tooltip"] = await browser.evaluate("document.querySelector('#tip').textContent")
        return drawn, browser.errors, png


def test_the_page_draws_the_seed_incident(seed_worker: LiveWorker) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.fail("headless Chromium not found: install Debian's chromium (`apt-get install -y chromium`, which "
                    "`python3 dev.py test` does when it can) or set LOCKSTEP_CHROMIUM to its path")
    drawn, errors, png = asyncio.run(_look(seed_worker.url, binary))
    assert errors == []  # no JavaScript exception, no console error (a CSP violation would be one)
    assert [lane["lane"] for lane in drawn["lanes"]] == list(LANE_ORDER)
    for lane in drawn["lanes"]:
        assert lane["hasData"] == "true" and lane["p50"] > 200 and lane["band"] > 200, lane
    fm = drawn["firstMover"]
    assert (fm["source"], fm["port"], fm["lane"], fm["domain"]) == ("leaf03", "17", "fabric_errors", "network")
    assert "first mover · leaf03 port 17 · SymbolErrorCounter · 11:42:10" in fm["label"]
    inc = drawn["incident"]
    assert inc["x"] - 1 <= fm["x"] <= inc["x"] + inc["width"]  # the first mover opens the incident window
    assert {"fabric_errors", "collective_time", "gpu_util", "step_time"} <= set(drawn["anomalies"])
    assert len(drawn["answers"]) == 7 and "256 GPUs" in drawn["answers"][0] and "lustre-a" in drawn["answers"][3]
    assert "network" in drawn["answers"][5]
    assert dict(drawn["jobs"]) == {"llm-70b": "recovered", "vision-7b": "ok", "rec-ft": "ok"}
    assert drawn["alerts"] >= 1 and drawn["title"].startswith("llm-70b")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and ARTIFACT.stat().st_size > 50_000
    assert "UTC" in drawn["tooltip"] and "Step time" in drawn["tooltip"] and "Fabric errors" in drawn["tooltip"]
