"""The test harness's in-thread worker: a stop that hangs is said, with what it waited on, and ended."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.web import conftest


class HangingWorker:
    def __init__(self) -> None:
        self.stop_called = False

    async def stop(self) -> None:
        self.stop_called = True
        await asyncio.sleep(3600)  # a stop that never finishes


def test_a_worker_whose_stop_hangs_is_a_warning_naming_what_it_waits_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "STOP_TIMEOUT_S", 0.2)
    worker = HangingWorker()

    async def start() -> tuple[Any, Any]:
        return worker, None

    said_first = r"hang-test: worker.stop\(\) did not finish within 0 s; its pending tasks were cancelled"
    with pytest.warns(UserWarning, match=said_first) as seen, \
            conftest.worker_in_thread("hang-test", start) as (got, _, loop):
        assert got is worker
    assert worker.stop_called
    said = str(seen[0].message)
    assert "coro=<HangingWorker.stop()" in said and "await asyncio.sleep(3600)" in said, said
    assert not loop.is_running()


def test_a_worker_that_stops_gives_no_warning() -> None:
    class Quick:
        async def stop(self) -> None:
            await asyncio.sleep(0)

    async def start() -> tuple[Any, Any]:
        return Quick(), "extra"

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with conftest.worker_in_thread("quick-test", start) as (_, extra, _loop):
            assert extra == "extra"
