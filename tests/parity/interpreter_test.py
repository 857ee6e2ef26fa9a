"""The exact replay evaluated in NumPy (program/interpreter.py), op by op against XLA:CPU compiling
the same StableHLO (an independent implementation of every op), and on a real program, GPT-2
traced by torchax, against the compiled exact replay. Ops it does not know make it refuse
(Unsupported, naming the op) and the replay compile as before."""

import numpy as np
import pytest
import torch

from torch_xla_ext._compat import jax_mlir
from torch_xla_ext.parity.program.interpreter import OPS, Interpreter, Unsupported
from torch_xla_ext.parity.program.replay import Replay
from torch_xla_ext.parity.program.stablehlo import Program, parse

RNG = np.random.default_rng(0)


def _xla(text: str, args: list) -> list:
    ctx, module = parse(text, "case")
    with ctx:
        bytecode = jax_mlir.module_to_bytecode(module)
    exe = jax_mlir.compile_replicated(jax_mlir.cpu_client(1), bytecode, 1)
    return jax_mlir.execute_replicated(jax_mlir.cpu_client(1), exe, [args])[0]


def _interpreted(text: str, args: list) -> list:
    ctx, module = parse(text, "case")
    with ctx:
        run = Interpreter(module)
    return run(list(args))


def _check(text: str, args: list) -> None:
    got, want = _interpreted(text, args), _xla(text, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            scale = max(1.0, float(np.nanmax(np.abs(w), initial=0.0)))
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            infinite = np.isinf(w)
            np.testing.assert_array_equal(g[infinite], w[infinite])
            finite = np.isfinite(w)
            assert np.abs(g[finite] - w[finite]).max(initial=0.0) <= 1e-13 * scale
        else:
            np.testing.assert_array_equal(g, w)


def _one(op_line: str, in_types: list[str], out_type: str) -> str:
    args = ", ".join(f"%a{k}: {t}" for k, t in enumerate(in_types))
    return f"func.func @main({args}) -> {out_type} {{\n  %0 = {op_line}\n  return %0 : {out_type}\n}}"


F = "tensor<3x4xf64>"
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4)) + 2.0
POSITIVE = np.abs(X) + 0.1

UNARY = ["abs", "negate", "exponential", "exponential_minus_one", "log", "log_plus_one", "sqrt", "rsqrt", "cbrt",
         "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil", "round_nearest_even", "sign"]
BINARY = ["add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "maximum", "minimum"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_match_xla(name):
    x = POSITIVE if name in ("log", "sqrt", "rsqrt", "log_plus_one") else X * 3.3
    _check(_one(f"stablehlo.{name} %a0 : {F}", [F], F), [x])


@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_match_xla(name):
    a = POSITIVE if name == "power" else X
    _check(_one(f"stablehlo.{name} %a0, %a1 : {F}", [F, F], F), [a, Y])


def test_power_by_a_broadcast_integer_and_other_exponents_matches_xla():
    for e in ("3.0", "2.0", "0.5", "-1.0", "0x7FF8000000000000"):
        text = f"""func.func @main(%x: {F}) -> {F} {{
  %c = stablehlo.constant dense<{e}> : tensor<f64>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f64>) -> {F}
  %0 = stablehlo.power %x, %b : {F}
  return %0 : {F}
}}"""
        _check(text, [POSITIVE])


def test_nan_and_infinities_follow_xla():
    a = np.array([[np.nan, 1.0, np.inf, -np.inf], [0.0, -0.0, 2.0, np.nan], [1.0, 1.0, 1.0, 1.0]])
    b = np.array([[1.0, np.nan, np.inf, 1.0], [0.0, 0.0, -np.inf, np.nan], [0.0, -0.0, np.inf, 3.0]])
    for name in ("maximum", "minimum", "add", "divide", "multiply"):
        _check(_one(f"stablehlo.{name} %a0, %a1 : {F}", [F, F], F), [a, b])


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_compare_select_and_logic_match_xla(direction):
    b1 = "tensor<3x4xi1>"
    text = f"""func.func @main(%a: {F}, %b: {F}) -> ({F}, {b1}) {{
  %p = stablehlo.compare {direction}, %a, %b, FLOAT : ({F}, {F}) -> {b1}
  %q = stablehlo.not %p : {b1}
  %r = stablehlo.and %p, %q : {b1}
  %s = stablehlo.or %r, %p : {b1}
  %0 = stablehlo.select %s, %a, %b : {b1}, {F}
  return %0, %s : {F}, {b1}
}}"""
    b = X.copy()
    b[0] = 0.0
    _check(text, [X, b])


def test_shapes_match_xla():
    text = """func.func @main(%x: tensor<2x3x4xf64>, %y: tensor<3xf64>) -> (tensor<4x2x3xf64>, tensor<6x4xf64>, tensor<1x2x2xf64>, tensor<2x3x8xf64>, tensor<4x3x2xf64>, tensor<2x5x4xf64>) {
  %0 = stablehlo.transpose %x, dims = [2, 0, 1] : (tensor<2x3x4xf64>) -> tensor<4x2x3xf64>
  %1 = stablehlo.reshape %x : (tensor<2x3x4xf64>) -> tensor<6x4xf64>
  %2 = stablehlo.slice %x [0:1, 0:3:2, 1:4:2] : (tensor<2x3x4xf64>) -> tensor<1x2x2xf64>
  %3 = stablehlo.concatenate %x, %x, dim = 2 : (tensor<2x3x4xf64>, tensor<2x3x4xf64>) -> tensor<2x3x8xf64>
  %4 = stablehlo.broadcast_in_dim %y, dims = [1] : (tensor<3xf64>) -> tensor<4x3x2xf64>
  %c = stablehlo.constant dense<1.5> : tensor<f64>
  %5 = stablehlo.pad %x, %c, low = [0, 1, 0], high = [0, 1, 0], interior = [0, 0, 0] : (tensor<2x3x4xf64>, tensor<f64>) -> tensor<2x5x4xf64>
  return %0, %1, %2, %3, %4, %5 : tensor<4x2x3xf64>, tensor<6x4xf64>, tensor<1x2x2xf64>, tensor<2x3x8xf64>, tensor<4x3x2xf64>, tensor<2x5x4xf64>
}"""
    _check(text, [RNG.standard_normal((2, 3, 4)), RNG.standard_normal(3)])


def test_broadcast_with_dimensions_out_of_order_matches_xla():
    text = """func.func @main(%x: tensor<3x2xf64>) -> tensor<2x5x3xf64> {
  %0 = stablehlo.broadcast_in_dim %x, dims = [2, 0] : (tensor<3x2xf64>) -> tensor<2x5x3xf64>
  return %0 : tensor<2x5x3xf64>
}"""
    _check(text, [RNG.standard_normal((3, 2))])


def test_constants_iota_convert_and_clamp_match_xla():
    text = """func.func @main(%x: tensor<2x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xi32>, tensor<2x3xf64>, tensor<2x3xi1>) {
  %c = stablehlo.constant dense<[[1.0, -2.0, 3.5], [0.25, 7.0, -1.0]]> : tensor<2x3xf64>
  %i = stablehlo.iota dim = 1 : tensor<2x3xi32>
  %f = stablehlo.convert %i : (tensor<2x3xi32>) -> tensor<2x3xf64>
  %lo = stablehlo.constant dense<-0.5> : tensor<2x3xf64>
  %hi = stablehlo.constant dense<0.5> : tensor<2x3xf64>
  %m = stablehlo.clamp %lo, %x, %hi : (tensor<2x3xf64>, tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>
  %s = stablehlo.add %m, %f : tensor<2x3xf64>
  %t = stablehlo.add %s, %c : tensor<2x3xf64>
  %b = stablehlo.convert %x : (tensor<2x3xf64>) -> tensor<2x3xi1>
  return %t, %i, %f, %b : tensor<2x3xf64>, tensor<2x3xi32>, tensor<2x3xf64>, tensor<2x3xi1>
}"""
    x = RNG.standard_normal((2, 3))
    x[0, 0] = 0.0
    _check(text, [x])


@pytest.mark.parametrize("reducer, init", [("add", "0.0"), ("multiply", "1.0"), ("maximum", "0xFFF0000000000000"),
                                           ("minimum", "0x7FF0000000000000"), ("add", "2.5")])
def test_reductions_match_xla(reducer, init):
    text = f"""func.func @main(%x: tensor<3x4x5xf64>) -> tensor<4xf64> {{
  %c = stablehlo.constant dense<{init}> : tensor<f64>
  %0 = stablehlo.reduce(%x init: %c) applies stablehlo.{reducer} across dimensions = [0, 2] : (tensor<3x4x5xf64>, tensor<f64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}}"""
    _check(text, [RNG.standard_normal((3, 4, 5))])


def test_a_cumulative_window_matches_xla():
    text = """func.func @main(%x: tensor<2x6xi32>, %y: tensor<2x6xf64>) -> (tensor<2x6xi32>, tensor<2x3xf64>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %0 = "stablehlo.reduce_window"(%x, %z) <{padding = dense<[[0, 0], [5, 0]]> : tensor<2x2xi64>, window_dimensions = array<i64: 1, 6>, window_strides = array<i64: 1, 1>}> ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>):
    %s = stablehlo.add %a, %b : tensor<i32>
    stablehlo.return %s : tensor<i32>
  }) : (tensor<2x6xi32>, tensor<i32>) -> tensor<2x6xi32>
  %m = stablehlo.constant dense<0xFFF0000000000000> : tensor<f64>
  %1 = "stablehlo.reduce_window"(%y, %m) <{window_dimensions = array<i64: 1, 2>, window_strides = array<i64: 1, 2>}> ({
  ^bb0(%a: tensor<f64>, %b: tensor<f64>):
    %s = stablehlo.maximum %a, %b : tensor<f64>
    stablehlo.return %s : tensor<f64>
  }) : (tensor<2x6xf64>, tensor<f64>) -> tensor<2x3xf64>
  return %0, %1 : tensor<2x6xi32>, tensor<2x3xf64>
}"""
    _check(text, [RNG.integers(-5, 5, (2, 6)).astype(np.int32), RNG.standard_normal((2, 6))])


def test_products_match_xla():
    text = """func.func @main(%a: tensor<2x3x4xf64>, %b: tensor<2x5x4xf64>, %c: tensor<4x6xf64>) -> (tensor<2x3x5xf64>, tensor<2x3x6xf64>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x3x4xf64>, tensor<2x5x4xf64>) -> tensor<2x3x5xf64>
  %1 = stablehlo.dot_general %a, %c, contracting_dims = [2] x [0] : (tensor<2x3x4xf64>, tensor<4x6xf64>) -> tensor<2x3x6xf64>
  return %0, %1 : tensor<2x3x5xf64>, tensor<2x3x6xf64>
}"""
    _check(text, [RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 5, 4)), RNG.standard_normal((4, 6))])


def test_gathers_match_xla():
    """An embedding's row lookup (one index per row, start indices clamped into range), and a 2-D
    point lookup with the index vector in the middle of the indices (torchax's take)."""
    text = """func.func @main(%w: tensor<10x4xf64>, %ids: tensor<2x3x1xi32>, %p: tensor<3x5xf64>, %ij: tensor<2x2x4xi32>) -> (tensor<2x3x4xf64>, tensor<2x4xf64>) {
  %0 = "stablehlo.gather"(%w, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 4>}> : (tensor<10x4xf64>, tensor<2x3x1xi32>) -> tensor<2x3x4xf64>
  %1 = "stablehlo.gather"(%p, %ij) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], start_index_map = [1, 0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}> : (tensor<3x5xf64>, tensor<2x2x4xi32>) -> tensor<2x4xf64>
  return %0, %1 : tensor<2x3x4xf64>, tensor<2x4xf64>
}"""
    ids = np.array([[[0], [9], [12]], [[-3], [4], [5]]], np.int32)  # 12 and -3 are clamped
    ij = RNG.integers(0, 3, (2, 2, 4)).astype(np.int32)
    _check(text, [RNG.standard_normal((10, 4)), ids, RNG.standard_normal((3, 5)), ij])


def test_calls_and_dynamic_slices_match_xla():
    text = """func.func @main(%x: tensor<6xf64>, %k: tensor<i32>) -> tensor<3xf64> {
  %0 = func.call @twice(%x) : (tensor<6xf64>) -> tensor<6xf64>
  %1 = stablehlo.dynamic_slice %0, %k, sizes = [3] : (tensor<6xf64>, tensor<i32>) -> tensor<3xf64>
  return %1 : tensor<3xf64>
}
func.func private @twice(%y: tensor<6xf64>) -> tensor<6xf64> {
  %0 = stablehlo.add %y, %y : tensor<6xf64>
  return %0 : tensor<6xf64>
}"""
    for k in (0, 2, 5, -1):  # 5 and -1 clamp
        _check(text, [RNG.standard_normal(6), np.array(k, np.int32)])


@pytest.mark.parametrize("text, named", [
    (_one("stablehlo.divide %a0, %a1 : tensor<4xi32>", ["tensor<4xi32>"] * 2, "tensor<4xi32>"), "stablehlo.divide"),
    (_one('stablehlo.custom_call @foo(%a0) : (tensor<4xf64>) -> tensor<4xf64>', ["tensor<4xf64>"], "tensor<4xf64>"),
     "stablehlo.custom_call"),
    (_one("stablehlo.convert %a0 : (tensor<4xf64>) -> tensor<4xi32>", ["tensor<4xf64>"], "tensor<4xi32>"),
     "float-to-integer"),
])
def test_an_unknown_op_is_refused_by_name_and_the_replay_compiles(text, named):
    ctx, module = parse(text, "case")
    with ctx, pytest.raises(Unsupported, match=named):
        Interpreter(module)
    if "custom_call" in text:  # XLA cannot compile it either
        return
    replay = Replay(Program(text.replace("f64", "f32")), rounded=False)
    assert replay.interpreter is None and named in replay.not_interpreted
    args = [np.array([7, -7, 9, 1], np.int32), np.array([2, 2, -4, 3], np.int32)] if "divide" in text else [
        np.array([1.7, -1.7, 2.5, -0.2], np.float32)]
    (got,) = replay(args)
    want = np.fix(args[0] / args[1]) if "divide" in text else np.fix(args[0])  # StableHLO rounds toward zero
    np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_an_interpreter_that_fails_on_its_arguments_leaves_the_replay_to_xla(monkeypatch):
    text = _one("stablehlo.tanh %a0 : tensor<4xf32>", ["tensor<4xf32>"], "tensor<4xf32>")
    replay = Replay(Program(text), rounded=False)
    assert replay.interpreter is not None and not replay.executables

    def fails(args):
        raise ValueError("a shape the interpreter got wrong")

    monkeypatch.setattr(replay.interpreter, "main", type("Main", (), {"run": staticmethod(fails)})())
    x = np.float32([0.5, -1.0, 2.0, 0.0])
    (got,) = replay([x])
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64)), rtol=1e-15)
    assert replay.interpreter is None and "ValueError" in replay.not_interpreted and len(replay.executables) == 1


def test_every_op_the_table_names_is_tested_here():
    tested = {f"stablehlo.{n}" for n in UNARY + BINARY} | {
        "stablehlo.not", "stablehlo.compare", "stablehlo.select", "stablehlo.clamp", "stablehlo.convert",
        "stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
        "stablehlo.transpose", "stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.concatenate", "stablehlo.pad",
        "stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.dot_general", "stablehlo.gather", "func.call",
        "stablehlo.and", "stablehlo.or"}
    untested = set(OPS) - tested - {"stablehlo.is_finite", "stablehlo.xor", "stablehlo.optimization_barrier"}
    assert not untested, untested


def test_gpt2_traced_by_torchax_against_the_compiled_exact_replay():
    from transformers import GPT2Config, GPT2LMHeadModel

    from torch_xla_ext.parity.stages import torchax_run

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64,
                                       use_cache=False, return_dict=False)).eval()
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1))
    run = torchax_run.run_torchax(model, (ids,), {}, None, 0, True)
    program = Program(run.program.proto)
    interpreted = Replay(program, rounded=False)
    assert interpreted.interpreter is not None, interpreted.not_interpreted
    got = interpreted(run.program.args)
    assert interpreted.interpreter is not None and interpreted.not_interpreted is None  # no fallback on the way
    # The same program compiled by XLA in f64.
    compiled = Replay(program, rounded=False, intermediates=True)  # intermediates: never interpreted
    assert compiled.interpreter is None
    want = compiled(run.program.args)[:compiled.num_results]
    for g, w in zip(got, want):
        assert np.abs(g - w).max() <= 1e-12 * np.abs(w).max()
