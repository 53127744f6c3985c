"""The page's fabric section in headless Chromium: the six questions from ``/fabric/report``, one row
per question, fabric and tier, for the seed incident (leaf03 port 17 takes the symbol errors)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.fabric import QUESTIONS

from .cdp import Chromium, find_chromium
from .conftest import LiveWorker

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(1200)]

ROWS = """[...document.querySelectorAll('#fabric-report tr')].map((tr) =>
  [...tr.querySelectorAll('td')].map((td) => td.textContent))"""


#: What the page says of a bandwidth group with no number: every link without a line rate, or none measured.
UNANSWERED = """[
  window.LockstepFabric.unanswered("bandwidth", {value: null, links_measured: 40, links_without_line_rate: 40,
                                                  throughput_gbps_p99: 20.19}),
  window.LockstepFabric.unanswered("bandwidth", {value: null, links_measured: 0, links_without_line_rate: 0}),
  window.LockstepFabric.unanswered("bandwidth", {value: 0.1, links_measured: 4, links_without_line_rate: 1})]"""


async def _rows(url: str, binary: str) -> tuple[list[list[str]], list[str], str, list[str]]:
    async with Chromium(binary) as browser:
        await browser.viewport(1600, 1000)
        await browser.navigate(f"{url}/")
        await browser.wait_for("document.querySelectorAll('#fabric-report tr td').length > 5")
        rows: Any = await browser.evaluate(ROWS)
        asof: Any = await browser.evaluate("document.querySelector('#fabric-asof').textContent")
        said: Any = await browser.evaluate(UNANSWERED)
        return rows, browser.errors, str(asof), said


def test_the_page_lists_the_six_fabric_questions(seed_worker: LiveWorker) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.fail("headless Chromium not found: install Debian's chromium or set LOCKSTEP_CHROMIUM to its path")
    rows, errors, asof, said = asyncio.run(_rows(seed_worker.url, binary))
    assert errors == []  # no JavaScript exception, no CSP violation
    assert asof.startswith("as of 2025-11-30")
    assert {r[0] for r in rows} == set(QUESTIONS)
    loss = [r for r in rows if r[:3] == ["loss", "infiniband", "leaf"]]
    assert len(loss) == 1 and "leaf03 port 17" in loss[0][4]
    # The simulator's inventory gives every link a line rate, so each bandwidth row has a number.
    bandwidth = [r for r in rows if r[0] == "bandwidth"]
    assert bandwidth and all(not r[3].startswith("\N{EN DASH}") and "speed_gbps" in r[4] for r in bandwidth), bandwidth
    assert said == ["40 of 40 links without a line rate in the inventory (link speed_gbps, switch ports); "
                    "throughput p99 20.19 Gb/s", "no transmit-byte counters from these links", ""]
