"""Dynamo's, AOTAutograd's and the openxla bridge's events as typed values: the one vocabulary of
what a compiled program did, shared by the graph-break ledger and the script trace.

``graph_breaks/watch.py`` is the one recorder: it joins the ``_compat`` wrappers' calls per
compile id, does the bookkeeping (a frame compile's duration, a bridge extraction's partitions,
CPU-fallback and eager nodes and XLA compiles) and hands every sink a finished event of a class
below. The ledger (``graph_breaks/ledger.py``) aggregates them into a region's report; the script
trace (``trace/dynamo.py``) writes each as one record of its rank file, whose reader validates it
against the same class (``trace/schema.py`` lists them under their ``ev`` names). A field renamed
here is renamed for both, and the trace's writer tests fail on a record that does not read back.

Each class is a dataclass of JSON values; ``t`` is when the event happened in milliseconds on the
sink's clock (the rank file's, since its header), 0.0 where a sink keeps no clock; ``t0_ns`` and
``t1_ns`` are ``time.monotonic_ns()`` stamps of the process that recorded it (the ledger's
timeline). Imports nothing but the standard library: the trace's reader and the recorder's
start-up read it without torch.

Example:
    >>> g = GraphBreak(compile_id="0/0", gb_type="Data-dependent branching", file="/t/train.py", line=9)
    >>> g.frame, g.logged
    ('/t/train.py:9', True)
    >>> BridgeExtraction(bridge=0, partitions=[Partition(graph_hash="ab", nodes=3)]).graph_hashes
    ['ab']
"""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["BREAK_FIGURES", "DYNAMO_FIGURES", "AotGraph", "BridgeExtraction", "DynamoGraph", "EVENTS", "FrameCompile", "GraphBreak", "Partition",
           "Recompile", "XlaCompile", "no_text_break"]

# A split Dynamo made (GraphCompileReason.graph_break) whose reason has no text.
no_text_break = "(a break Dynamo gave no reason text)"


@dataclasses.dataclass
class FrameCompile:
    """One Dynamo frame compile (one compile id, ``"1/0"``: frame 1, first compile)."""

    compile_id: str
    name: str  # the compiled code object's name
    frame: str  # "file:line" of its first line
    ms: Optional[float] = None  # the compile's duration
    error: Optional[str] = None  # the exception that ended it, one line
    t: float = 0.0
    t0_ns: int = 0
    t1_ns: int = 0


@dataclasses.dataclass
class Recompile:
    """A recompile of a frame and the first guard that failed."""

    compile_id: str
    reason: str  # the failed guard, as Dynamo words it (TORCH_LOGS=recompiles)
    frame: str
    t: float = 0.0


@dataclasses.dataclass
class GraphBreak:
    """One graph break with Dynamo's structured record (``format_graph_break_message``).

    ``origin``: ``break`` (an unsupported operation: a split Dynamo logs, and counts when
    ``counted``), ``jump`` (a data-dependent jump in a frame's own code: logged, not counted),
    ``frame_skipped`` (a break in a for/while loop: Dynamo gave up on the frame), ``inherited``
    (a split at a call because something inside the inlined callee is unsupported: neither logged
    nor counted; ``split_at`` is that call)."""

    compile_id: str
    gb_type: str
    gb_id: Optional[str] = None
    explanation: str = ""
    hints: list[str] = dataclasses.field(default_factory=list)
    context: str = ""
    doc: Optional[str] = None
    file: str = ""  # the user frame
    line: int = 0
    function: str = ""
    origin: str = "break"
    counted: bool = False  # in Dynamo's counters["graph_break"]
    split_at: Optional[str] = None
    dynamo_reason: str = ""  # what GraphCompileReason says alone
    t: float = 0.0

    @property
    def frame(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def logged(self) -> bool:
        """Dynamo logged it (``dynamo_graph_break_reason``): every origin but ``inherited``."""
        return self.origin != "inherited"


@dataclasses.dataclass
class DynamoGraph:
    """A graph Dynamo handed the backend; ``ended_by``: the break that split it there (its
    gb_type at its frame), None when the graph ends at the frame's return."""

    compile_id: str
    graph: int  # this process's number for it
    nodes: int
    ops: int
    ended_by: Optional[str] = None
    t: float = 0.0

    @property
    def ended_by_break(self) -> bool:
        return self.ended_by is not None


@dataclasses.dataclass
class AotGraph:
    """A graph AOTAutograd handed the backend: ``kind`` forward, backward or inference."""

    compile_id: str
    graph: Optional[int]  # the Dynamo graph it was made of
    name: str
    kind: str
    nodes: int
    t: float = 0.0


@dataclasses.dataclass
class Partition:
    """One XLA graph the bridge made of an AOT graph."""

    graph_hash: str  # the bridge's hash of it (torch_xla's _get_graph_hash)
    nodes: int


@dataclasses.dataclass
class XlaCompile:
    """An XLA compile of one of the bridge's graphs."""

    graph_hash: str
    ms: float
    compile_id: Optional[str] = None  # of the bridge extraction it happened in
    ordinal: Optional[int] = None  # torch_xla's CompileTime count once it compiled
    t: float = 0.0
    t0_ns: int = 0
    t1_ns: int = 0


@dataclasses.dataclass
class BridgeExtraction:
    """The bridge's extraction of one AOT graph (at its first run): its XLA partitions, the aten
    ops left to eager (``fallback_nodes``), the other nodes left there (``eager_nodes``: inputs,
    constants, outputs holding CPU tensors) and the XLA compiles it made."""

    bridge: int
    compile_id: Optional[str] = None
    aot_name: Optional[str] = None
    nodes: int = 0
    ms: Optional[float] = None
    partitions: list[Partition] = dataclasses.field(default_factory=list)
    fallback_nodes: list[str] = dataclasses.field(default_factory=list)
    eager_nodes: list[str] = dataclasses.field(default_factory=list)
    compiles: list[XlaCompile] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    t: float = 0.0
    t0_ns: int = 0
    t1_ns: int = 0

    @property
    def graph_hashes(self) -> list[str]:
        return [p.graph_hash for p in self.partitions]


# The record name (``ev``) of each event in the script trace's rank files.
EVENTS: dict[str, type] = {
    "frame_compile": FrameCompile, "recompile": Recompile, "graph_break": GraphBreak, "dynamo_graph": DynamoGraph,
    "aot_graph": AotGraph, "bridge": BridgeExtraction, "xla_compile": XlaCompile,
}


# ---- the figures, one name each ----------------------------------------------------------------------

# The graph-break figures: (figure, label, the events it counts, the upstream record of the same
# events). One definition each: graph_breaks' report, its HTML, the script trace and the docs
# quote these, and tests/graph_breaks/break_figures_test.py ties each value to its upstream record.
BREAK_FIGURES: tuple[tuple[str, str, str, str], ...] = (
    ("logged_breaks", "graph breaks (logged)",
     "Every graph break Dynamo logs: the counted breaks, the data-dependent jumps in a frame's own code, "
     "and the breaks in a loop that made it skip the frame. A break inside an inlined call is logged twice "
     "when its frame is compiled on its "
     "own later (once where the caller splits at the call, once in the callee's frame). This is the "
     "'graph breaks' figure of the side-by-side table.",
     "the structured trace's dynamo_graph_break_reason artifacts (TORCH_TRACE, TORCH_LOGS=graph_breaks)"),
    ("counted_breaks", "graph breaks (Dynamo's counter)",
     "Unsupported operations Dynamo turned into a split, including a data-dependent jump inside an inlined "
     "call (the caller splits at the call); not a jump in a frame's own code.",
     "sum(torch._dynamo.utils.counters['graph_break'].values())"),
    ("data_dependent_jumps", "data-dependent jumps",
     "Branches on a tensor's value in a frame's own code: logged, split there, not counted.",
     "explain().break_reasons whose reason starts with 'generic_jump'"),
    ("skipped_frames", "frames skipped after a break in a loop",
     "Breaks inside a for/while loop: Dynamo logs the break, then gives up on the whole frame (SkipFrame), "
     "which runs uncompiled (lazy tensors on XLA); not counted, no split.",
     "Dynamo's log 'Skipping frame because there is a graph break in a for/while loop' (TORCH_LOGS=dynamo)"),
    ("inherited_splits", "splits inherited from an inlined call",
     "Splits a caller takes at a call because something inside the inlined callee is unsupported, "
     "without logging or counting them (GraphCompileReason 'step_unsupported'); listed under the break "
     "that caused them.",
     "explain().break_reasons whose reason is 'step_unsupported'"),
    ("graphs_ended_by_break", "graphs ended by a break",
     "Graphs handed to the backend that a break (of any kind above) ended; a split before any op makes "
     "no graph, so this can be lower than the breaks.",
     "len(torch._dynamo.explain(fn)(...).break_reasons)"),
)

_BREAK = {k: (label, oracle) for k, label, _counts, oracle in BREAK_FIGURES}
# The Dynamo figures of one process, by the name GraphBreakReport gives each: (name, label, the
# upstream record it equals). The script trace's report.json (``dynamo[].figures``,
# ``dynamo_figures``) uses these names and words.
DYNAMO_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("dynamo_compiles", "Dynamo frame compiles (compile ids)", "dynamo_start records of torch's structured trace"),
    ("fx_graphs", "Dynamo graphs (handed to the backend)", "counters['stats']['unique_graphs'], explain().graph_count"),
    *((k, *_BREAK[k]) for k in ("logged_breaks", "counted_breaks", "graphs_ended_by_break")),
    ("recompiles", "recompiles", "TORCH_LOGS=recompiles, compile ids N/1, N/2, ..."),
    ("aot_graphs", "AOT graphs (forward/backward/inference)", "aot_*_graph records of torch's structured trace"),
    ("xla_partitions", "XLA partitions (bridge)", "torch_xla's dynamo_bridge.extract_internal calls (one per partition)"),
    ("fallback_nodes", "CPU-fallback nodes (bridge)",
     "torch_xla's UnsupportedNodesCollector (the bridge's partitioner); each runs as a CPU fallback, in "
     "executed_fallback_ops() until the next extraction clears torch_xla's counters"),
)
