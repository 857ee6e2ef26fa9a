"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ending in NUL on file descriptors 3 and 4), for pages that never go idle.

``--virtual-time-budget`` waits for the network to go quiet, which a page holding an EventSource
open (Model Explorer's server stream) never does; here the test waits in real time, polling a
JavaScript condition, then reads the DOM and takes a screenshot.

    with Browser(profile_dir) as b:
        b.open(url, until="document.querySelector('canvas') !== null", timeout=60)
        text = b.evaluate("document.body.innerText")
        b.screenshot("shot.png")
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from typing import Any

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-unsafe-swiftshader", "--use-angle=swiftshader"]


class Browser:
    def __init__(self, profile: str, width: int = 1600, height: int = 1000):
        assert CHROMIUM, "chromium is not installed: run python/setup_env.sh (it installs Debian's chromium)"
        self._args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                      "--remote-debugging-pipe", "about:blank"]
        self._size = (width, height)
        self._id = 0
        self._buf = b""
        self._session: str | None = None

    def __enter__(self) -> "Browser":
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands from fd 3 and writes answers to fd 4.
        self._proc = subprocess.Popen(
            self._args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=lambda: (os.dup2(to_chrome_r, 3), os.dup2(from_chrome_w, 4)))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._send("Browser.close", session=False, timeout=10)
        except Exception:
            pass
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=20)
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def _send(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60) -> dict:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self._session:
            msg["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def open(self, url: str, until: str, timeout: float = 90) -> None:
        """Opens ``url`` in a new page and waits until the JavaScript expression ``until`` is true."""
        target = self._send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   session=False)["sessionId"]
        w, h = self._size
        self._send("Emulation.setDeviceMetricsOverride", {"width": w, "height": h, "deviceScaleFactor": 1,
                                                          "mobile": False})
        self._send("Page.enable")
        self._send("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"Boolean({until})") is True:
                return
            time.sleep(0.5)
        raise TimeoutError(f"the page did not reach `{until}` within {timeout} s")

    def evaluate(self, expression: str) -> Any:
        r = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return r.get("result", {}).get("value")

    def screenshot(self, path: str) -> bytes:
        data = base64.b64decode(self._send("Page.captureScreenshot", {"format": "png"})["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data
