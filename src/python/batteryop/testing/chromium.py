"""Headless Chromium (Debian's `chromium`) driven over its DevTools protocol, for the docs'
browser test.

`launch(profile)` starts `chromium --headless --remote-debugging-pipe` with a fresh profile and
talks to it over the two pipes that flag opens (fd 3 in, fd 4 out; each message a JSON object
ended by a NUL byte), so there is no port to find and no third-party client: one reader task
routes answers to the calls awaiting them and events to the tabs they belong to (flattened
sessions, `Target.attachToTarget(flatten=True)`). `Browser.page()` opens a tab that records
every console message, exception, log entry and network failure it sees; `Page.goto` waits for
the page's own load event, `Page.evaluate` awaits a script's promise.

The browser is kept off the network: every host name but 127.0.0.1 resolves to nothing
(`--host-resolver-rules`), so a page that needs anything from outside shows it as a failed
request rather than quietly fetching it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batteryop.api._compat import within

CALL_TIMEOUT_SECONDS = 60.0

FLAGS = (
    "--headless",
    "--remote-debugging-pipe",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


class ChromiumError(RuntimeError):
    """Chromium could not start, or a DevTools call failed."""


def executable() -> str | None:
    """Debian's `chromium`, if installed."""
    return shutil.which("chromium")


@dataclass
class Page:
    """One tab: what it logged, and calls into it."""

    browser: Browser
    session: str
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    _urls: dict[str, str] = field(default_factory=dict)
    _waiters: dict[str, list[asyncio.Future[dict[str, Any]]]] = field(default_factory=dict)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, session=self.session)

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            args = params.get("args") or []
            self.console_errors.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            )
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            exc = details.get("exception") or {}
            self.console_errors.append(str(exc.get("description") or details.get("text")))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry.get('text')} ({entry.get('url', '')})")
        elif method == "Network.requestWillBeSent":
            self._urls[params["requestId"]] = params["request"]["url"]
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = self._urls.get(params["requestId"], "?")
            self.failed_requests.append(f"{params.get('errorText')} {url}")
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            response = params["response"]
            self.failed_requests.append(f"{response['status']} {response['url']}")
        for waiter in self._waiters.pop(method, []):
            if not waiter.done():
                waiter.set_result(params)

    def next_event(self, method: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next `method` event (made before the call that causes it)."""
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(method, []).append(waiter)
        return waiter

    async def goto(self, url: str, timeout: float = CALL_TIMEOUT_SECONDS) -> None:
        """Navigate and wait for the page's load event (its images, scripts and styles)."""
        loaded = self.next_event("Page.loadEventFired")
        answer = await self.send("Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise ChromiumError(f"{url}: {answer['errorText']}")
        await within(loaded, timeout)

    async def evaluate(self, expression: str) -> Any:
        """The value of a script (a promise is awaited), or ChromiumError with its exception."""
        answer = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            exc = details.get("exception") or {}
            raise ChromiumError(str(exc.get("description") or details.get("text")))
        return answer["result"].get("value")

    async def screenshot(self, path: Path, max_height: int = 8000) -> None:
        """A PNG of the whole page (up to `max_height` CSS pixels), not only the viewport."""
        size = (await self.send("Page.getLayoutMetrics"))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height)}
        answer = await self.send(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": {**clip, "scale": 1}},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(answer["data"]))


class Browser:
    """A running Chromium and its DevTools pipe."""

    def __init__(
        self, process: asyncio.subprocess.Process, reader: asyncio.StreamReader, out_fd: int
    ) -> None:
        self.process = process
        self._reader = reader
        self._out_fd = out_fd
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._pages: dict[str, Page] = {}
        self._read_task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                message = json.loads((await self._reader.readuntil(b"\0"))[:-1])
                if "id" in message:
                    call = self._calls.pop(message["id"], None)
                    if call is None or call.done():
                        continue
                    if "error" in message:
                        call.set_exception(ChromiumError(str(message["error"])))
                    else:
                        call.set_result(message.get("result") or {})
                elif (page := self._pages.get(message.get("sessionId", ""))) is not None:
                    page.on_event(message["method"], message.get("params") or {})
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            for call in self._calls.values():
                if not call.done():
                    call.set_exception(ChromiumError(f"Chromium closed its pipe: {e}"))

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        call_id = next(self._ids)
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = answer
        os.write(self._out_fd, json.dumps(message).encode() + b"\0")
        try:
            return await within(answer, CALL_TIMEOUT_SECONDS)
        except TimeoutError:
            raise ChromiumError(f"{method}: no answer in {CALL_TIMEOUT_SECONDS:.0f}s") from None

    async def page(self, width: int = 1280, height: int = 900) -> Page:
        """A new tab with the Page, Runtime, Log and Network domains on, at a fixed size."""
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        page = Page(self, attached["sessionId"])
        self._pages[page.session] = page
        for domain in ("Page", "Runtime", "Log", "Network"):
            await page.send(f"{domain}.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    async def close(self) -> None:
        with contextlib.suppress(ChromiumError):
            await within(self.send("Browser.close"), 10)
        try:
            await within(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self._read_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._read_task
        os.close(self._out_fd)


@contextlib.asynccontextmanager
async def launch(profile: Path, log: Path) -> AsyncIterator[Browser]:
    """Headless Chromium with a fresh profile in `profile`, its stderr in `log`."""
    binary = executable()
    if binary is None:
        raise ChromiumError("chromium not found: install Debian's chromium")
    # Chromium reads commands from its fd 3 and writes answers and events to its fd 4: bash
    # puts the pipes there and execs it (dash takes one-digit fds only; no preexec_fn in a
    # process with threads).
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    redirect = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "-c",
            redirect,
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            "about:blank",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            pass_fds=(to_browser_r, from_browser_w),
        )
    os.close(to_browser_r)
    os.close(from_browser_w)
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(from_browser_r, "rb", buffering=0)
    )
    browser = Browser(process, reader, to_browser_w)
    try:
        yield browser
    finally:
        await browser.close()
        transport.close()
