"""Canaries: one test per torch/torch_xla internal that ``_compat`` calls or wraps, and one per
upstream message text it matches. A torch, torch_xla or JAX upgrade that changes one fails here,
named by the internal, instead of deep inside a graph-break report.

Each is checked against what upstream records itself: Dynamo's counters and ``explain``, torch's
structured trace (``oracles.TraceLog``), torch's graph-break registry file, torch_xla's metrics.
The wrappers are exercised by one compiled run of a function with every kind of split (a print, a
data-dependent ``if``, a logger call inside an inlined helper, a CPU-fallback op) and a recompile,
recorded by a listener that keeps every call ``_compat.dynamo`` and ``_compat.openxla`` forward."""

import collections
import json
import logging
import os
import re
import sys

import pytest
import torch
import torch._dynamo
import torch_xla
import torch_xla.debug.metrics as met
from torch._dynamo.utils import counters

from torch_xla_ext import graph_breaks as gb
from torch_xla_ext._compat import dynamo as _dynamo
from torch_xla_ext._compat import hlo_debug as _hlo_debug
from torch_xla_ext._compat import lazy as _lazy
from torch_xla_ext._compat import metrics as _metrics
from torch_xla_ext._compat import openxla as _openxla

sys.path.insert(0, os.path.dirname(__file__))
import oracles  # noqa: E402

DEVICE = torch_xla.device()
REGISTRY = json.load(open(os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")))
GB_IDS = {e["Gb_type"]: k for k, v in REGISTRY.items() for e in v}
WIDTH = 24  # a width no other test file uses: nothing comes from another test's compile cache
STEADY = 3

_log = logging.getLogger("torch_xla_ext.tests.canary")
_log.addHandler(logging.NullHandler())
_log.propagate = False


def helper(h):
    _log.warning("canary")  # Dynamo cannot trace a logger: the caller splits at this call, inherited
    return h * 2


def step(x):
    h = torch.relu(x + 1)
    print("canary", file=gb.DISCARD)  # a graph break Dynamo logs and counts
    h = helper(h)
    if h.sum() > 0:  # a data-dependent jump
        h = h * 2
    return torch.digamma(h.abs() + 1)  # no XLA lowering: the bridge leaves it to eager


PRINT_LINE = step.__code__.co_firstlineno + 2


class Recorder:
    """A DynamoListener keeping every call, tagged with the phase of the run it came in."""

    def __init__(self):
        self.calls: list[tuple[str, str, tuple]] = []
        self.phase = "compile"
        self.executions = 0
        self.stand_ins = 0

    def __getattr__(self, method):
        def record(*args):
            self.calls.append((self.phase, method, args))
            if method in ("dynamo_graph_start", "bridge_start"):
                return len(self.calls)
            return None
        return record

    def of(self, method, phase=None):
        return [a for p, m, a in self.calls if m == method and (phase is None or p == phase)]

    def run_cached_graph(self, original):
        self.stand_ins += 1

        def stand_in(*args, **kwargs):
            self.executions += 1
            return original(*args, **kwargs)
        return stand_in


@pytest.fixture(scope="module")
def run():
    """One recorded run: compile (first call), STEADY cached calls, one recompile (a new shape)."""
    x = torch.randn(4, WIDTH)
    torch._dynamo.reset()
    expected = torch._dynamo.explain(step)(x)  # Dynamo's own pass, on the CPU, before ours
    torch._dynamo.reset()
    counters.clear()
    (x + 1).to(DEVICE).sum().item()  # a lazy compile first, so the bridge has counters to restore
    rec = Recorder()
    compiled = torch.compile(step, backend="openxla")
    xd, x2 = x.to(DEVICE), torch.randn(6, WIDTH).to(DEVICE)
    _dynamo.install(rec)
    _openxla.install(rec, rec.run_cached_graph)
    try:
        with oracles.TraceLog() as trace, torch.no_grad():
            compiled(xd)
            torch_xla.sync()
            _metrics.wait_device_ops()
            compile_trace = dict(trace.kinds)
            rec.phase = "steady"
            rec.executions = 0
            before = met.metric_data("ExecuteTime")[0]
            for _ in range(STEADY):
                compiled(xd)
            _metrics.wait_device_ops()
            executed = met.metric_data("ExecuteTime")[0] - before
            steady_executions = rec.executions
            rec.phase = "recompile"
            compiled(x2)
            torch_xla.sync()
    finally:
        _openxla.uninstall()
        _dynamo.uninstall()
    return {"rec": rec, "explain": expected, "trace": compile_trace,
            "graph_break": dict(counters["graph_break"]),
            "executed": executed, "steady_executions": steady_executions}


# ---- plain calls ----------------------------------------------------------------------------------


def test_aten_op_name_reads_an_operators_schema_name():
    assert _dynamo.aten_op_name(torch.ops.aten.digamma.default) == "aten::digamma"
    assert _dynamo.aten_op_name(torch.ops.aten.add) == "aten::add"
    assert _dynamo.aten_op_name(torch.ops.prims.convert_element_type.default) == "prims::convert_element_type"
    assert _dynamo.aten_op_name(lambda t: t) is None


def test_reset_dynamo_forgets_compiled_frames():
    from torch._dynamo.testing import CompileCounter

    cnt = CompileCounter()
    fn = torch.compile(lambda t: t * 3, backend=cnt)
    fn(torch.ones(2))
    fn(torch.ones(2))
    assert cnt.frame_count == 1
    _dynamo.reset_dynamo()
    fn(torch.ones(2))
    assert cnt.frame_count == 2


def test_replica_is_the_default_devices_ordinal():
    assert _openxla.replica() == torch_xla.device().index == 0


def test_graph_break_registry_gives_the_gb_id_and_its_page():
    """torch's registry (``_load_gb_type_to_gb_id_map``, ``get_gbid_documentation_link``) against
    the registry file itself."""
    gb_type, gb_id = next(iter(GB_IDS.items()))
    record = _dynamo.parse_graph_break(f"{gb_type}\n  Explanation: x\n")
    assert record["structured"] and record["gb_id"] == gb_id
    assert record["doc"] and gb_id[2:].lstrip("0") in record["doc"]


# ---- upstream message text --------------------------------------------------------------------------


def test_dynamo_graph_break_message_format_parses(run):
    """``format_graph_break_message``'s layout (Explanation:, Hint:, Developer debug context:)."""
    (msg,) = [msg for _, msg, frame in run["rec"].of("break_logged", "compile")
              if frame is not None and (frame.filename, frame.lineno) == (__file__, PRINT_LINE)]
    r = _dynamo.parse_graph_break(msg)
    assert r["structured"] and "print" in r["explanation"] and r["hints"] and r["context"]
    assert r["gb_id"] == GB_IDS[r["gb_type"]] and r["doc"].endswith(f"{r['gb_id'].lower()}.html")


def test_split_reason_text_of_a_data_dependent_jump():
    """``generic_jump``: GraphCompileReason's text for a data-dependent branch."""
    def branch(x):
        y = x.sin()
        if y.sum() > 0:
            y = y * 2
        return y.cos()

    torch._dynamo.reset()
    reasons = [str(r.reason) for r in torch._dynamo.explain(branch)(torch.randn(4)).break_reasons]
    assert [_dynamo.split_kind(r) for r in reasons] == ["jump"], reasons


def test_split_reason_texts_of_a_logged_break_and_a_jump(run):
    kinds = collections.Counter(_dynamo.split_kind(reason) for _, _, reason, _ in run["rec"].of("split", "compile"))
    assert kinds["jump"] >= 1 and kinds["break"] >= 1 and not kinds["inherited"], kinds


def test_split_reason_text_of_a_split_inherited_from_an_inlined_call():
    """``step_unsupported``: GPT-2 with labels (transformers' loss_function logs a warning inside
    calls Dynamo inlines) splits its forward frame at the call with only that text."""
    from tests import zoo

    model, args, kwargs = zoo.build("gpt2")
    kwargs = {**kwargs, "labels": args[0]}
    rec = Recorder()
    torch._dynamo.reset()
    _dynamo.install(rec)  # Dynamo alone: the eager backend has no bridge
    try:
        torch.compile(model, backend="eager")(*args, **kwargs)
    finally:
        _dynamo.uninstall()
    kinds = collections.Counter(_dynamo.split_kind(reason) for _, _, reason, _ in rec.of("split"))
    assert kinds["inherited"] >= 1, kinds


def test_lru_miss_text_of_a_step_that_only_passes_the_loss_through():
    """torch_xla 2.9's "Failed to get computation by hash": a compiled training step ending in
    ``return loss.detach()``, with no watch open (the upstream error itself)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Linear(WIDTH, 4).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2, WIDTH).to(DEVICE)
    torch_xla.sync()

    def train_step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = torch.compile(train_step, backend="openxla")
    with pytest.raises(RuntimeError) as info:
        for _ in range(3):
            compiled(x)
            torch_xla.sync()
    assert _dynamo.is_lru_miss(info.value), str(info.value)[:500]


@pytest.fixture(scope="module")
def pool_failure():
    """torch_xla 2.9's openxla path on adaptive_avg_pool2d of a channels_last input."""
    def pool(x):
        return torch.nn.functional.adaptive_avg_pool2d(x.contiguous(memory_format=torch.channels_last), 1)

    torch._dynamo.reset()
    x = torch.randn(1, 8, 4, 4).to(DEVICE)
    with pytest.raises(Exception) as info:
        with torch.no_grad():
            torch.compile(pool, backend="openxla")(x)
    return info.value


def test_expected_xla_tensor_text(pool_failure):
    assert _dynamo.message_has(str(pool_failure), _dynamo.EXPECTED_XLA_TENSOR)


def test_dynamo_wraps_the_backend_error_as_inner_exception(pool_failure):
    chain = _dynamo.exception_chain(pool_failure)
    assert _dynamo.is_dynamo_wrapper(chain[0]) and isinstance(chain[0], torch._dynamo.exc.BackendCompilerFailed)
    assert isinstance(chain[-1], RuntimeError) and not _dynamo.is_dynamo_wrapper(chain[-1])


def test_fx_interpreter_and_operator_call_locals(pool_failure):
    """The FX interpreter's ``run_node(n)`` and torch's ``OpOverload.__call__`` locals."""
    found = [_dynamo.frame_locals_call(f) for f, _ in _dynamo.exception_frames(pool_failure)]
    nodes = [n for n, _, _ in found if n is not None]
    ops = [(op, xla) for _, op, xla in found if op is not None]
    assert nodes and _dynamo.node_aten_op(nodes[-1]) == "aten::adaptive_avg_pool2d"
    assert ops and ops[-1][1] is True  # the kernel got an XLA tensor argument
    src = _dynamo.node_source(nodes[-1])
    assert src is not None and src["file"] == __file__ and "adaptive_avg_pool2d" in src["code"]


def test_file_layout_names_each_layer(pool_failure):
    import torch._functorch.aot_autograd as aot
    import torch_xla._dynamo.dynamo_bridge as bridge

    assert _dynamo.frame_layer(bridge.__file__) == "torch_xla's openxla bridge"
    assert _dynamo.frame_layer(aot.__file__) == "AOTAutograd"
    assert _dynamo.frame_layer(torch._dynamo.convert_frame.__file__) == "Dynamo"
    assert _dynamo.frame_layer(torch_xla.__file__) == "torch_xla"
    assert _dynamo.frame_layer(torch.__file__) == "PyTorch"
    assert _dynamo.frame_layer(__file__) is None
    files = [f.f_code.co_filename for f, _ in _dynamo.exception_frames(pool_failure)]
    assert _dynamo.is_op_dispatch(files[-1]) and _dynamo.is_op_dispatch(torch._ops.__file__)
    layers = {_dynamo.frame_layer(f) for f in files}
    assert {"Dynamo", "AOTAutograd", "PyTorch"} <= layers, layers


def test_xlac_call_of_a_torch_xla_source_line():
    import inspect

    import torch_xla.core.xla_model as xm

    lines, first = inspect.getsourcelines(xm.wait_device_ops)
    k = next(i for i, ln in enumerate(lines) if "_XLAC." in ln)
    assert _dynamo.xlac_call_at(xm.__file__, first + k) == re.search(r"_XLAC\.(\w+)", lines[k]).group(1)


def test_dynamo_user_frame_of_an_unsupported():
    """``innermost_user_frame_summary`` / ``real_stack`` on a Dynamo error with fullgraph."""
    def breaks(x):
        print("x", file=gb.DISCARD)
        return x + 1

    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        torch.compile(breaks, backend="eager", fullgraph=True)(torch.ones(2))
    frame = _dynamo.user_frame(info.value)
    assert frame is not None and frame["file"] == __file__ and frame["function"] == "breaks"
    assert _dynamo.compile_id_of(info.value) is not None


# ---- each wrapped entry point -----------------------------------------------------------------------


def test_convert_frame_compile(run):
    starts, ends = run["rec"].of("frame_start", "compile"), run["rec"].of("frame_end", "compile")
    assert [cid for cid, _ in starts] == [cid for cid, _, _ in ends]
    assert all(re.fullmatch(r"\d+/\d+", cid) for cid, _ in starts)
    assert all(err is None for _, _, err in ends)
    assert "step" in {code.co_name for _, code in starts}
    assert len(starts) == run["trace"].get("dynamo_start", 0) > 0


def test_log_graph_break(run):
    logged = run["rec"].of("break_logged", "compile")
    assert any(frame is not None and (frame.filename, frame.lineno) == (__file__, PRINT_LINE) for _, _, frame in logged)


def test_unsupported_add_to_stats(run):
    rec = run["rec"]
    assert len(rec.of("break_counted")) == sum(run["graph_break"].values()) > 0
    # The print's Unsupported, raised with its message and the user's frames.
    (logged,) = [msg for _, msg, f in rec.of("break_logged", "compile") if f is not None and f.lineno == PRINT_LINE]
    raised = [(msg, stack) for _, msg, stack in rec.of("unsupported_raised", "compile") if msg == logged]
    assert raised and all((stack[-1].filename, stack[-1].lineno) == (__file__, PRINT_LINE) for _, stack in raised)


def test_graph_compile_reason(run):
    splits = run["rec"].of("split", "compile")
    assert all(isinstance(key, int) and reason for _, key, reason, _ in splits)
    # Where Dynamo split, as explain reports it (its break reasons' user frames).
    ours = {(f.filename, f.lineno) for _, _, _, f in splits}
    assert {(b.user_stack[-1].filename, b.user_stack[-1].lineno) for b in run["explain"].break_reasons} <= ours
    assert {file for file, _ in ours} == {__file__}


def test_recompilation_reasons(run):
    recompiles = run["rec"].of("recompile", "recompile")
    assert recompiles and all("size" in guard for _, guard, _, _ in recompiles)
    assert (__file__, step.__code__.co_firstlineno) in {(file, line) for _, _, file, line in recompiles}


def test_call_user_compiler(run):
    graphs = run["rec"].of("dynamo_graph_start", "compile")
    assert len(graphs) == run["explain"].graph_count == run["trace"].get("dynamo_output_graph", 0)
    assert len(run["rec"].of("dynamo_graph_end", "compile")) == len(graphs)
    ended = [split_key for _, _, _, split_key, _ in graphs if split_key is not None]
    assert set(ended) <= {key for _, key, _, _ in run["rec"].of("split", "compile")}


def test_xla_backend_helper(run):
    graphs = run["rec"].of("backend_graph", "compile")
    assert len(graphs) == run["trace"].get("aot_inference_graph", 0) > 0
    assert all(kind == "inference" and aot_id and aot_name.endswith(f"_inference_{aot_name.rsplit('_', 1)[1]}")
               for _, _, aot_name, aot_id, kind, _ in graphs)


def test_extract_compiled_graph(run):
    models = [m for _, m, _, _, _, _ in run["rec"].of("backend_graph", "compile")]
    bridged = run["rec"].of("bridge_start", "compile")
    assert len(bridged) == len(models) and all(any(m is b for m in models) for b, _ in bridged)
    assert [e for _, e in run["rec"].of("bridge_end", "compile")] == [None] * len(bridged)


def test_unsupported_nodes_collector(run):
    ops = [op for op, _ in run["rec"].of("unsupported_node", "compile") if op is not None]
    assert "aten::digamma" in ops


def test_collector_restores_counters(run):
    restored = dict((c, v) for c, v in run["rec"].of("counter_restored", "compile"))
    assert restored.get("UncachedCompile", 0) > 0
    assert oracles.xla_counter("UncachedCompile") >= restored["UncachedCompile"]


def test_extract_internal_and_graph_hash(run):
    parts = run["rec"].of("partition", "compile")
    assert len(parts) >= len(run["rec"].of("bridge_start", "compile"))
    assert all(nodes > 0 and re.fullmatch(r"[0-9a-f]{32,}", h) and t1 >= t0 for nodes, h, t0, t1 in parts)


def test_warm_up_cache(run):
    hashes = {h for _, h, _, _ in run["rec"].of("partition", "compile")}
    compiled = run["rec"].of("bridge_compile", "compile")
    assert compiled and all(h in hashes and t1 >= t0 for h, t0, t1 in compiled)


def test_run_cached_graph(run):
    assert run["rec"].stand_ins == 1
    assert run["steady_executions"] == run["executed"] > 0


def test_install_restores_every_entry_point(run):
    import torch._dynamo.convert_frame as cf

    assert not hasattr(cf._compile, "__wrapped__")
    assert not hasattr(torch_xla._XLAC._run_cached_graph, "__wrapped__")


# ---- torch_xla's lazy-tensor runtime and its metrics ---------------------------------------------------


def test_step_marker_is_where_every_sync_ends():
    calls = []

    def make(original):
        def stand_in(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)
        return stand_in

    _lazy.replace_step_marker(make)
    try:
        for _ in range(3):
            torch_xla.sync()
    finally:
        _lazy.restore_step_marker()
    assert len(calls) == 3
    torch_xla.sync()
    assert len(calls) == 3


def test_compile_count_is_compile_times_samples():
    before = _metrics.compile_count()
    (torch.ones(5, 7, device=DEVICE) * 11.5).sum().item()  # a graph of shapes no other test compiles
    data = met.metric_data("CompileTime")
    assert _metrics.compile_count() == data[0] == before + 1
    (wall, ns), = _metrics.compile_samples(1)
    assert (wall, ns) == tuple(data[2][-1]) and ns > 0


def test_ir_debug_switch_is_torch_xlas():
    was = _hlo_debug.ir_debug()
    try:
        _hlo_debug.set_ir_debug(not was)
        assert torch_xla._XLAC._get_ir_debug() is (not was)
    finally:
        _hlo_debug.set_ir_debug(was)
    assert _hlo_debug.ir_debug() is was


def test_counter_reader_reads_torch_xlas_counters():
    (torch.ones(3, device=DEVICE) * 5).sum().item()
    read = _metrics.counter_reader()
    for name in met.counter_names():
        assert (read(name) or 0) == (met.counter_value(name) or 0)


def test_counter_window_survives_clear_counters():
    with _metrics.CounterWindow() as w:
        (torch.ones(7, device=DEVICE) + 1).sum().item()
        met.clear_counters()
        (torch.ones(9, device=DEVICE) + 1).sum().item()
    assert w.delta().counter("UncachedCompile") == 2


# ---- upstream text matched by the other _compat modules ----------------------------------------------


def test_mlir_names_an_unregistered_dialect():
    """MLIR's parse error for an op of a dialect JAX's context does not register (pt2e's quant)."""
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir

    quant = "tensor<2x!quant.uniform<i8:f32, 1.0>>"
    texts = [  # a type of the dialect, and an op of it in its custom form: MLIR words each differently
        f"func.func @main(%arg0: {quant}) -> {quant} {{\n  return %arg0 : {quant}\n}}",
        "func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %0 = quant.qcast %arg0 : tensor<2xf32> to tensor<2xf32>\n  return %0 : tensor<2xf32>\n}",
    ]
    for text in texts:
        with jax_mlir.make_context():
            with pytest.raises(ir.MLIRError) as info:
                ir.Module.parse(text)
        assert jax_mlir.unknown_dialect(str(info.value)) == "quant", str(info.value)
    assert jax_mlir.unknown_dialect("expected ')' at end of input") is None


def test_jax_export_names_a_serialization_version_it_does_not_read():
    """jax.export's "deserialize unsupported version N", on a file written with a newer version
    number (the writer's own constant raised, so the bytes are jax's own layout)."""
    from unittest import mock

    import jax
    import jax.export
    import jax.numpy as jnp
    from jax._src.export import serialization

    from torch_xla_ext._compat import jax_export

    exp = jax.export.export(jax.jit(lambda a: a * 2))(jax.ShapeDtypeStruct((2,), jnp.float32))
    with mock.patch.object(serialization, "_SERIALIZATION_VERSION", 99):
        data = exp.serialize()
    with pytest.raises(ValueError) as info:
        jax_export.deserialize(data)
    assert jax_export.unsupported_version(info.value) == 99
    assert jax_export.unsupported_version(ValueError("truncated")) is None


# ---- torch._logging's structured trace ----------------------------------------------------------------


def test_structured_trace_takes_an_artifact_under_a_compile_id():
    """``trace_structured("artifact", ..., compile_id=CompileId.from_string(...))`` and the
    trace logger's handlers (what ``trace_log.active`` reads)."""
    from torch_xla_ext._compat import trace_log

    with oracles.TraceLog() as trace:
        assert trace_log.active()  # a listener on torch's trace logger
        trace_log.artifact("txe_canary", {"figure": 1}, "0/0")
        trace_log.artifact("txe_canary", {"figure": 2}, None)
    assert trace.kinds["artifact:txe_canary"] == 2
    with pytest.raises(ValueError):
        trace_log.artifact("txe_canary", {}, "not a compile id")
