"""A small DevTools-protocol driver for the system's headless Chromium (never a downloaded
browser): start it with background networking off, open pages, run JavaScript, wait for
conditions inside the page, take screenshots."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",  # it runs as root in CI
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-breakpad",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--window-size=1280,860",
    "--remote-debugging-port=0",
]


class Browser:
    """One Chromium process and its browser-level DevTools connection."""

    def __init__(self, profile: Path) -> None:
        self.process = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._closing = contextlib.ExitStack()
        self.ws: ClientConnection = self._closing.enter_context(
            connect(self._endpoint(), max_size=2**26, open_timeout=30)
        )
        self._ids = itertools.count(1)

    def _endpoint(self) -> str:
        assert self.process.stderr is not None
        for line in self.process.stderr:  # Chromium announces its endpoint on stderr
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                return found.group(1)
        raise RuntimeError("Chromium exited without opening its DevTools endpoint")

    def call(self, method: str, session: str | None = None, **params: Any) -> Any:
        """Send one command and return its result (events in between are skipped)."""
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def page(self, url: str) -> Page:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        return page

    def close(self) -> None:
        self._closing.close()
        self.process.terminate()
        self.process.wait(20)
        if self.process.stderr is not None:
            self.process.stderr.close()


class Page:
    """One tab, driven through its flattened session."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, **params: Any) -> Any:
        return self.browser.call(method, self.session, **params)

    def js(self, expression: str) -> Any:
        """The value of ``expression`` (awaited when it is a promise).

        Raises:
            RuntimeError: it threw.
        """
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, condition: str, timeout_ms: int = 15_000) -> Any:
        """Wait inside the page until ``condition`` (JavaScript) is truthy; its value.

        Raises:
            RuntimeError: it stayed falsy for ``timeout_ms``.
        """
        condition_js = json.dumps(condition)
        return self.js(
            "new Promise((resolve, reject) => { const t0 = Date.now(); (function check() {"
            f" let v; try {{ v = ({condition}); }} catch (e) {{ v = undefined; }}"
            " if (v) resolve(v);"
            f" else if (Date.now() - t0 > {timeout_ms})"
            f" reject(new Error('timed out: ' + {condition_js}));"
            " else setTimeout(check, 25); })(); })"
        )

    def text_of(self, element_id: str) -> str:
        return str(self.js(f"document.getElementById({json.dumps(element_id)}).innerText"))

    def screenshot(self, path: Path, *, whole: bool = False) -> Path:
        """The viewport as a PNG at ``path`` (``whole``: the whole page, below the fold too)."""
        params: dict[str, Any] = {"format": "png"}
        if whole:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params |= {"captureBeyondViewport": True, "clip": clip}
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
