"""The browser helper the Model Explorer checks use: Playwright from its tool venv drives Debian's
chromium to a page whose text changes after load (a condition waited for in real time), reads it
back and writes a real screenshot (the oracle: the PNG decoded, the painted colour found)."""

import json
import urllib.parse

import numpy as np

from tests.parity.browser import render

PAGE = ("<html><body style='margin:0;background:#ff0000'><h1 id='t'>loading</h1>"
        "<script>setTimeout(() => { document.getElementById('t').textContent = 'drawn'; "
        "document.body.style.background = '#00ff00'; }, 500)</script></body></html>")


def test_render_waits_evaluates_and_screenshots(tmp_path):
    from io import BytesIO

    from PIL import Image

    url = "data:text/html," + urllib.parse.quote(PAGE)
    shot = str(tmp_path / "page.png")
    page = render(url, until="document.getElementById('t').textContent === 'drawn'", settle_s=0.2,
                  evaluate={"text": "document.body.innerText", "size": "[innerWidth, innerHeight]",
                            "json": "JSON.stringify({a: 1})"}, screenshot=shot, width=320, height=200, timeout=60)
    assert page["text"].strip() == "drawn" and page["size"] == [320, 200] and json.loads(page["json"]) == {"a": 1}
    img = np.asarray(Image.open(BytesIO(page["screenshot"])).convert("RGB")).astype(int)
    assert img.shape == (200, 320, 3)
    assert int((np.abs(img - [0, 255, 0]).sum(axis=-1) <= 12).sum()) > 320 * 100  # drawn after the wait
