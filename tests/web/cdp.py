"""A minimal Chrome DevTools Protocol driver for headless Chromium (aiohttp websocket; no Node, no Selenium).

Starts Debian's ``chromium`` with the flags this machine's closed network needs, on a fresh profile,
finds its page target, and offers navigate / evaluate / wait_for / mouse / screenshot. JavaScript
exceptions and console errors are collected in :attr:`Chromium.errors`. The process is stopped by
its own PID.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--force-color-profile=srgb", "--remote-debugging-port=0")


def find_chromium() -> str | None:
    """``LOCKSTEP_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    env = os.environ.get("LOCKSTEP_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.profile = tempfile.mkdtemp(prefix="lockstep-chromium-")
        self.proc: asyncio.subprocess.Process | None = None
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.ids = itertools.count(1)
        self.errors: list[str] = []

    async def __aenter__(self) -> Chromium:
        self.proc = await asyncio.create_subprocess_exec(
            self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        assert self.proc.stderr is not None
        port = None
        async with asyncio.timeout(60):
            while port is None:
                line = (await self.proc.stderr.readline()).decode(errors="replace")
                if not line:
                    raise RuntimeError("chromium exited before it opened its DevTools port")
                m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
                if m:
                    port = int(m.group(1))
        asyncio.get_running_loop().create_task(self._drain())
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = json.loads(await resp.text())
        page = next(t for t in targets if t["type"] == "page")
        self.ws = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        await self.send("Runtime.enable")
        await self.send("Page.enable")
        return self

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with contextlib.suppress(Exception):
            while await self.proc.stderr.readline():
                pass

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGKILL)
                await self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.ws is not None
        msg_id = next(self.ids)
        await self.ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        while True:
            msg = await self.ws.receive(timeout=60)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"DevTools connection closed: {msg.type}")
            data = json.loads(msg.data)
            if data.get("id") == msg_id:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                result: dict[str, Any] = data.get("result", {})
                return result
            self._event(data)

    def _event(self, data: dict[str, Any]) -> None:
        method = data.get("method")
        params = data.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(str(details.get("exception", {}).get("description") or details.get("text")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))

    async def evaluate(self, expression: str) -> Any:
        out = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True})
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression[:80]}: {out['exceptionDetails'].get('text')}")
        return out.get("result", {}).get("value")

    async def viewport(self, width: int, height: int) -> None:
        await self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                               "deviceScaleFactor": 1, "mobile": False})

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout_s
        last: Exception | None = None
        while True:
            try:
                value = await self.evaluate(expression)
            except RuntimeError as exc:  # e.g. document.body is still null while the page loads
                value, last = None, exc
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"waited {timeout_s:.0f} s for: {expression} (last error: {last})")
            await asyncio.sleep(0.2)

    async def mouse_move(self, x: float, y: float) -> None:
        await self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    async def screenshot(self, path: Path) -> bytes:
        out = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
        png = base64.b64decode(out["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return png
