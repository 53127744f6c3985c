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


async def _rows(url: str, binary: str) -> tuple[list[list[str]], list[str], str]:
    async with Chromium(binary) as browser:
        await browser.viewport(1600, 1000)
        await browser.navigate(f"{url}/")
        await browser.wait_for("document.querySelectorAll('#fabric-report tr td').length > 5")
        rows: Any = await browser.evaluate(ROWS)
        asof: Any = await browser.evaluate("document.querySelector('#fabric-asof').textContent")
        return rows, browser.errors, str(asof)


def test_the_page_lists_the_six_fabric_questions(seed_worker: LiveWorker) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.fail("headless Chromium not found: install Debian's chromium or set LOCKSTEP_CHROMIUM to its path")
    rows, errors, asof = asyncio.run(_rows(seed_worker.url, binary))
    assert errors == []  # no JavaScript exception, no CSP violation
    assert asof.startswith("as of 2025-11-30")
    assert {r[0] for r in rows} == set(QUESTIONS)
    loss = [r for r in rows if r[:3] == ["loss", "infiniband", "leaf"]]
    assert len(loss) == 1 and "leaf03 port 17" in loss[0][4]
