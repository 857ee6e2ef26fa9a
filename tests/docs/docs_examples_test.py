"""Every ```python block in docs/*.md runs, each in a fresh interpreter (PJRT_DEVICE=CPU, an
empty temporary working directory, `torch_xla_ext` importable from the package under test), so an
API change that breaks an example fails here. Blocks meant only for reading use other fences
(```sh, ```cpp, ```text)."""

import os
import re
import subprocess
import sys

import pytest

import torch_xla_ext

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.normpath(os.path.join(HERE, "..", "..", "docs"))  # checkout and Bazel runfiles alike
# One page per component; each must carry at least one runnable example.
PAGES = ("numerics.md", "export.md", "jax_call.md", "graph_breaks.md", "parity.md", "doctor.md")
RUNNABLE = ("python", "py")
BLOCK_TIMEOUT_S = 300

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")


def extract_blocks(text):
    """Fenced code blocks of a Markdown page as (info string, first line number, code)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group("fence"), m.group("info").strip(), i + 1
        body, i = [], i + 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if close and close.group("fence")[0] == fence[0] and len(close.group("fence")) >= len(fence) \
                    and not close.group("info").strip():
                break
            body.append(lines[i])
            i += 1
        else:
            raise ValueError(f"unclosed code fence opened on line {start}")
        blocks.append((info.split()[0].lower() if info else "", start, "\n".join(body) + "\n"))
        i += 1
    return blocks


def _pages():
    return sorted(f for f in os.listdir(DOCS) if f.endswith(".md"))


def _examples():
    out = []
    for page in _pages():
        with open(os.path.join(DOCS, page), encoding="utf-8") as f:
            blocks = [b for b in extract_blocks(f.read()) if b[0] in RUNNABLE]
        out += [(page, n, line, code) for n, (_, line, code) in enumerate(blocks, 1)]
    return out


EXAMPLES = _examples()


def test_every_component_page_has_a_runnable_example():
    have = {page for page, _, _, _ in EXAMPLES}
    missing = [p for p in PAGES if p not in have]
    assert not missing, f"pages without a ```python example (or missing) in {DOCS}: {missing}"


def test_fence_parser():
    text = "intro\n```python\nx = 1\n```\n```sh\nls\n```\n````python\n```\ninner\n```\n````\n"
    assert extract_blocks(text) == [("python", 2, "x = 1\n"), ("sh", 5, "ls\n"),
                                    ("python", 8, "```\ninner\n```\n")]
    with pytest.raises(ValueError, match="unclosed"):
        extract_blocks("```python\nx = 1\n")


def _env():
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(torch_xla_ext.__file__)))
    path = os.pathsep.join(p for p in (pkg_parent, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1")


@pytest.mark.parametrize("page,n,line,code", EXAMPLES, ids=[f"{p}-block{n}" for p, n, _, _ in EXAMPLES])
def test_example_runs(page, n, line, code, tmp_path):
    # Padded so a traceback's line numbers are the page's: `File ".../numerics.md.py", line 24`.
    script = tmp_path / f"{page}.py"
    script.write_text("\n" * line + code)
    work = tmp_path / "cwd"
    work.mkdir()
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=work, env=_env(), capture_output=True,
                              text=True, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"docs/{page}, python block {n} (fence on line {line}): no result within {BLOCK_TIMEOUT_S} s")
    if proc.returncode != 0:
        pytest.fail(f"docs/{page}, python block {n} (fence on line {line}) exited with {proc.returncode}\n"
                    f"--- stderr (last 4000 chars) ---\n{proc.stderr[-4000:]}\n"
                    f"--- stdout (last 1000 chars) ---\n{proc.stdout[-1000:]}", pytrace=False)
