"""A page rendered in headless Chromium, driven by Playwright: for pages that never go idle
(Model Explorer holds an EventSource open), the page is opened, a JavaScript condition is waited
for in real time, then expressions are evaluated and a screenshot taken.

Playwright runs in a cached tool venv (python/tool_requirements/playwright.txt, made by
python/tool_venv.py on first use) and launches Debian's chromium (``executable_path``): it cannot
download a browser of its own here. This module is both the test side (:func:`render`, no
Playwright import) and, run as a script by the tool venv's Python, the Playwright side.

    result = render(url, until="document.querySelector('canvas') !== null",
                    evaluate={"text": "document.body.innerText"}, screenshot="shot.png", timeout=120)
    result["text"], result["screenshot"]   # the evaluated value, the PNG's bytes
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--enable-unsafe-swiftshader", "--use-angle=swiftshader"]


def render(url: str, until: str, *, evaluate: dict[str, str] | None = None, screenshot: str | None = None,
           settle_s: float = 2.0, width: int = 1600, height: int = 1000, timeout: float = 90) -> dict[str, Any]:
    """Opens ``url``, waits until the JavaScript expression ``until`` is true (``timeout`` seconds),
    lets the page draw for ``settle_s``, then returns {name: value} of ``evaluate``'s expressions,
    and, with ``screenshot`` (a path it writes), the PNG's bytes under "screenshot"."""
    import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)

    chromium = shutil.which("chromium") or CHROMIUM
    if not os.path.exists(chromium):
        raise FileNotFoundError("chromium is not installed: run python/setup_env.sh (it installs Debian's chromium)")
    spec = {"url": url, "until": until, "evaluate": evaluate or {}, "screenshot": screenshot, "settle_s": settle_s,
            "width": width, "height": height, "timeout": timeout, "chromium": chromium}
    python = tool_venv.ensure("playwright") / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    out = subprocess.run([str(python), os.path.abspath(__file__)], input=json.dumps(spec), capture_output=True,
                         text=True, timeout=timeout + 120, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"the page did not render ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if screenshot is not None:
        with open(screenshot, "rb") as f:
            result["screenshot"] = f.read()
    return result


def _main() -> None:  # in the tool venv: Playwright's side
    from playwright.sync_api import sync_playwright

    spec = json.loads(sys.stdin.read())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=spec["chromium"], args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": spec["width"], "height": spec["height"]})
            page.goto(spec["url"], wait_until="commit", timeout=spec["timeout"] * 1000)
            page.wait_for_function(f"Boolean({spec['until']})", timeout=spec["timeout"] * 1000, polling=500)
            page.wait_for_timeout(spec["settle_s"] * 1000)
            result = {name: page.evaluate(expr) for name, expr in spec["evaluate"].items()}
            if spec["screenshot"]:
                page.screenshot(path=spec["screenshot"])
        finally:
            browser.close()
    print(json.dumps(result))


if __name__ == "__main__":
    _main()
