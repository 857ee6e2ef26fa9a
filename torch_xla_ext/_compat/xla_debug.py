"""torch_xla's own per-graph analysis (``PT_XLA_DEBUG_LEVEL``), the one place that knows its
environment variables and its text.

With ``PT_XLA_DEBUG_LEVEL=1`` torch_xla writes, for every XLA compile, a "Compilation Analysis"
block: the cause it guessed from the Python frames, the graph hash, the number of graph inputs
and outputs, and the Python frames that triggered it (innermost first, at most
``PT_XLA_DEBUG_MAX_FRAME``); then a "Post Compilation Analysis" block of sizes. Level 2 adds an
"Execution Analysis" block for every execution. ``PT_XLA_DEBUG_FILE`` sends the text to a file
(appended, one block per write, the file opened and closed around each block) instead of stderr.
torch_xla reads the three variables once per process, at its first analysis, and only the process
whose ``PJRT_LOCAL_PROCESS_RANK`` is 0 writes (xmp.spawn sets it per child; torchrun does not).
A compile triggered on a thread without Python frames (autograd's backward thread) gets no block.

:func:`parse` turns the text into :class:`Entry` objects; a block cut short (a process killed while
writing) stays in the returned remainder.

Example:
    >>> text = '''
    ... Compilation Analysis: ================================================================================
    ... Compilation Analysis: Compilation Cause
    ... Compilation Analysis:   user torch_xla.sync
    ... Compilation Analysis: Graph Info: 
    ... Compilation Analysis:   Graph Hash: c5d01b9a9b964da09351dffe467eb0e8
    ... Compilation Analysis:   Number of Graph Inputs: 49
    ... Compilation Analysis:   Number of Graph Outputs: 90
    ... Compilation Analysis: Python Frame Triggered Execution: 
    ... Compilation Analysis:   sync (/venv/torch_xla/torch_xla.py:87)
    ... Compilation Analysis:   <module> (/tmp/train.py:17)
    ... Compilation Analysis: --------------------------------------------------------------------------------
    ... Compilation Analysis: ================================================================================
    ... '''
    >>> entries, rest = parse(text)
    >>> e = entries[0]
    >>> e.kind, e.cause, e.graph_hash, e.inputs, e.frames[1]
    ('compile', 'user torch_xla.sync', 'c5d01b9a9b964da09351dffe467eb0e8', 49, ('<module>', '/tmp/train.py', 17))
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["DEBUG_VARIABLES", "Entry", "configure", "parse", "writes_in_this_process"]

LEVEL, FILE, MAX_FRAME, ENABLE = "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "PT_XLA_DEBUG_MAX_FRAME", "PT_XLA_DEBUG"
# What a user sets to see torch_xla's analysis themselves; set any of them and the trace leaves all alone.
DEBUG_VARIABLES = (ENABLE, LEVEL, FILE)
_LOCAL_RANK = "PJRT_LOCAL_PROCESS_RANK"

_PREFIXES = {
    "Compilation Analysis: ": "compile",
    "Execution Analysis: ": "execute",
    "Unexpected Execution Analysis: ": "execute",
    "Post Compilation Analysis: ": "post",
}
_RULE = re.compile(r"^[=-]{20,}$")
_FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")
_SIZE = re.compile(r"^(Graph input size|Graph output size|Aliased Input size|Intermediate tensor size|"
                   r"Compiled program size): ([0-9.]+) GB$")
_SIZE_KEYS = {"Graph input size": "input_gb", "Graph output size": "output_gb", "Aliased Input size": "aliased_gb",
              "Intermediate tensor size": "intermediate_gb", "Compiled program size": "program_gb"}


@dataclasses.dataclass
class Entry:
    """One analysis block: a compile ("compile") or an execution ("execute")."""

    kind: str
    cause: str = ""
    graph_hash: str = ""
    graph_name: str = ""
    inputs: int | None = None
    outputs: int | None = None
    frames: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)  # innermost first
    sizes: dict[str, float] = dataclasses.field(default_factory=dict)  # a compile's post-compilation sizes
    unexpected: bool = False  # torch_xla.compile's "no execution allowed" region was broken


def configure(environ: dict[str, str], path: str, max_frames: int = 64) -> bool:
    """Asks torch_xla (through ``environ``, before it reads it) to write its compile and execution
    analysis to ``path``. Returns False, changing nothing, when the user set one of
    :data:`DEBUG_VARIABLES` (they read torch_xla's analysis themselves)."""
    if any(v in environ for v in DEBUG_VARIABLES):
        return False
    environ[LEVEL] = "2"
    environ[FILE] = path
    environ.setdefault(MAX_FRAME, str(max_frames))
    return True


def release(environ: dict[str, str]) -> None:
    """Takes back what :func:`configure` set (so a child process can configure its own file)."""
    for v in (LEVEL, FILE):
        environ.pop(v, None)


def writes_in_this_process(environ: dict[str, str]) -> bool:
    """Whether torch_xla writes its analysis in this process: only where PJRT_LOCAL_PROCESS_RANK
    is unset or 0."""
    try:
        return int(environ.get(_LOCAL_RANK, "0") or 0) == 0
    except ValueError:
        return True


def parse(text: str) -> tuple[list[Entry], str]:
    """The complete blocks of ``text`` and the unparsed remainder (a block still being written,
    or text after the last complete block). "Post Compilation Analysis" sizes go to the compile
    before them; lines of no block are skipped."""
    entries: list[Entry] = []
    lines = text.split("\n")
    consumed = 0  # characters of complete blocks (and the skipped lines between them)
    pos = 0
    current: Entry | None = None
    section = ""
    rules = 0
    for i, raw in enumerate(lines):
        end = pos + len(raw) + (1 if i < len(lines) - 1 else 0)
        if i == len(lines) - 1 and not text.endswith("\n"):
            break  # a line still being written
        kind, body = _split(raw)
        if kind is None:
            if current is None:
                consumed = end
            pos = end
            continue
        if kind == "post":
            m = _SIZE.match(body.strip())
            if m and entries and entries[-1].kind == "compile":
                entries[-1].sizes[_SIZE_KEYS[m.group(1)]] = float(m.group(2))
            if current is None:
                consumed = end
            pos = end
            continue
        stripped = body.strip()
        if current is None:
            if _RULE.match(stripped) and stripped.startswith("="):
                current = Entry(kind=kind, unexpected=raw.startswith("Unexpected"))
                rules, section = 1, ""
            else:
                consumed = end
            pos = end
            continue
        if _RULE.match(stripped):
            if stripped.startswith("=") and rules >= 1 and section:
                entries.append(current)
                current = None
                consumed = end
            pos = end
            continue
        if stripped in ("Compilation Cause", "Execution Cause"):
            section = "cause"
        elif stripped == "Graph Info:":
            section = "info"
        elif stripped == "Python Frame Triggered Execution:":
            section = "frames"
        elif section == "cause":
            current.cause = (current.cause + " " + stripped).strip()
        elif section == "info":
            key, _, value = stripped.partition(": ")
            if key == "Graph Hash":
                current.graph_hash = value.strip()
            elif key == "Graph Name":
                current.graph_name = value.strip()
            elif key == "Number of Graph Inputs":
                current.inputs = _int(value)
            elif key == "Number of Graph Outputs":
                current.outputs = _int(value)
        elif section == "frames" and stripped != "..........":
            m = _FRAME.match(stripped)
            if m:
                current.frames.append((m.group(1), m.group(2), int(m.group(3))))
        pos = end
    return entries, text[consumed:]


def _split(line: str) -> tuple[str | None, str]:
    for prefix, kind in _PREFIXES.items():
        if line.startswith(prefix):
            return kind, line[len(prefix):]
    return None, line


def _int(v: str) -> int | None:
    try:
        return int(v.strip())
    except ValueError:
        return None
