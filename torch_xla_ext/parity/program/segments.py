"""A replay's ``main`` cut into segments at given values, each distinct segment compiled once.

A transformer's blocks are the same program on different weights. XLA compiles every copy: at
GPT-2 355M the rounded replay with the module tensors spent about 45 CPU-seconds compiling 24
copies of one block (most of it LLVM code generation, one kernel per fusion). Cut at the values
between the blocks (the run's block outputs: ``capturing.Recorder.cuts``,
``capturing.BlockValues.cuts``), the blocks after the first are one segment program with the
same text, compiled once and run once per block on its own weights.

The cut is exact: segment ``j`` holds the operations the ``j``-th cut value needs that no
earlier cut needed, and the last segment everything else, so every operation runs once, after
everything it reads, on the same values. Only fusion boundaries move: a value that crosses a
cut is written out in its own type and read back, where the whole program might have fused it
into its readers. In a bf16/f16 program every such value is rounded before it crosses, so no
product and sum can contract into one FMA across a cut; in an f32 program they could, which is
why the emulation figure (the replay against the run), not this module, says whether the
replay reproduces the run. Constants and iotas are copied into each segment that reads them,
so that copies of a block do not differ by where their shared scalars happen to be defined.

Example:
    >>> text = '''func.func @main(%x: tensor<4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    ...   %c = stablehlo.constant dense<2.0> : tensor<4xf32>
    ...   %0 = stablehlo.multiply %x, %a : tensor<4xf32>
    ...   %1 = stablehlo.add %0, %c : tensor<4xf32>
    ...   %2 = stablehlo.multiply %1, %b : tensor<4xf32>
    ...   %3 = stablehlo.add %2, %c : tensor<4xf32>
    ...   return %3, %1 : tensor<4xf32>, tensor<4xf32>
    ... }'''
    >>> from torch_xla_ext.parity.program.stablehlo import parse
    >>> ctx, module = parse(text, "example")
    >>> with ctx:
    ...     plan = split(module, [1])          # cut at main's result 1, %1
    >>> len(plan.segments), len(plan.modules)  # two segments of the same program
    (2, 1)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Hashable, Sequence


from torch_xla_ext._mlir_graph import pre_order
from torch_xla_ext.parity.program.mlir import ir
from torch_xla_ext.parity.program.stablehlo import functions

__all__ = ["Plan", "Segment", "split"]

# Operations without operands or regions: copied into each segment that reads them.
_FREE = frozenset({"stablehlo.constant", "stablehlo.iota"})


@dataclasses.dataclass
class Segment:
    """One segment's program (an index into :attr:`Plan.modules`) and the keys of the values it
    reads and writes, in its ``main``'s order. A key is ``("arg", k)`` for main's argument k or
    ``(i, r)`` for result r of main's top-level operation i."""

    module: int
    inputs: list[Hashable]
    outputs: list[Hashable]


@dataclasses.dataclass
class Plan:
    """Segments in the order they run, the distinct programs they run (MLIR modules), and the
    keys of main's results. ``last_use[key]``: the index of the last segment that reads it."""

    segments: list[Segment]
    modules: list[Any]
    results: list[Hashable]
    last_use: dict[Hashable, int]


def split(module: Any, cuts: Sequence[int], min_repeats: int = 2) -> Plan | None:
    """The plan for ``module`` cut at main's results ``cuts`` (each distinct segment a module of
    its own, its operations copied from ``module``'s ``main``, which is left as it was); None
    when a cut cannot be made (a region that reads a value from outside its operation, a copy
    that does not verify) or when no segment program would run at least ``min_repeats`` times
    (nothing to gain). Runs inside the module's context."""
    funcs = functions(module)
    main = next((f for f in funcs if ir.StringAttr(f.attributes["sym_name"]).value == "main"), None)
    if main is None or not cuts:
        return None
    body = main.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    ret, ops = ops[-1], ops[:-1]
    index: dict[Any, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        for r, v in enumerate(op.results):
            index[v] = (i, r)
    args = {v: ("arg", k) for k, v in enumerate(body.arguments)}
    if _reads_from_outside(ops, index, args):
        return None
    returned = list(ret.operands)
    # A returned constant (position ids' iota) is made once, by a segment, like any result.
    made = {index[v][0] for v in returned if v in index}
    free = [op.name in _FREE and not list(op.operands) and not list(op.regions) and i not in made
            for i, op in enumerate(ops)]
    # Segment j: what cut j needs that no earlier cut needs; the rest after the last cut.
    segment_of: dict[int, int] = {}
    cut_ops = sorted({index[returned[c]][0] for c in cuts if 0 <= c < len(returned) and returned[c] in index})
    for j, start in enumerate(cut_ops):
        stack = [start]
        while stack:
            i = stack.pop()
            if i in segment_of or free[i]:
                continue
            segment_of[i] = j
            stack.extend(index[v][0] for v in ops[i].operands if v in index)
    tail = len(cut_ops)
    members: list[list[int]] = [[] for _ in range(tail + 1)]
    for i in range(len(ops)):
        if not free[i]:
            members[segment_of.get(i, tail)].append(i)
    members = [m for m in members if m]

    def key(v: Any) -> Hashable:
        return args[v] if v in args else index[v]

    last_read: dict[Hashable, int] = {}
    for s, m in enumerate(members):
        for i in m:
            for v in ops[i].operands:
                if v in args or not free[index[v][0]]:
                    last_read[key(v)] = s
    results = [key(v) for v in returned]
    result_keys = set(results)

    plans, signatures = [], []
    constants: dict[int, tuple] = {}  # op index -> text of a copied constant (a large one is printed once)
    for s, m in enumerate(members):
        inside = set(m)
        inputs: list[Any] = []
        seen: set[Any] = set()
        for i in m:
            for v in ops[i].operands:
                if v in seen or (v in index and (index[v][0] in inside or free[index[v][0]])):
                    continue
                seen.add(v)
                inputs.append(v)
        outputs = [v for i in m for v in ops[i].results
                   if last_read.get(index[v], -1) > s or index[v] in result_keys]
        plans.append((m, inputs, outputs))
        signatures.append(_signature(ops, m, inputs, outputs, index, constants))
    counts = Counter(signatures)  # in order of first appearance
    if max(counts.values()) < min_repeats:  # nothing compiled once runs twice
        return None
    distinct = {sig: d for d, sig in enumerate(counts)}

    # Each distinct program from its first segment, with the module's other functions (a segment
    # may call them).
    modules: list[Any] = [None] * len(distinct)
    segments = []
    for s, (m, inputs, outputs) in enumerate(plans):
        d = distinct[signatures[s]]
        if modules[d] is None:
            with ir.Location.unknown():
                modules[d] = _build(ops, m, inputs, outputs, index, [f for f in funcs if f != main])
            try:
                modules[d].operation.verify()
            except ir.MLIRError:  # an op this cut cannot copy on its own: the program stays whole
                return None
        segments.append(Segment(d, [key(v) for v in inputs], [key(v) for v in outputs]))
    return Plan(segments, modules, results, last_read)


def _reads_from_outside(ops: list, index: dict, args: dict) -> bool:
    """Whether an operation's regions read a value of main's top level (a segment's copy of the
    operation would lose those reads)."""
    return any(v in index or v in args
               for op in ops for region in op.regions for block in region.blocks
               for inner, _, _ in pre_order(block) for v in inner.operands)


def _signature(ops: list, members: list[int], inputs: list, outputs: list, index: dict, constants: dict) -> tuple:
    """What makes two segments the same program: their operations (names, attributes, types,
    regions) with every operand named by where it comes from in the segment."""
    local: dict[Any, Any] = {v: ("in", k) for k, v in enumerate(inputs)}
    sig: list[Any] = [tuple(str(v.type) for v in inputs)]
    for n, i in enumerate(members):
        op = ops[i]
        refs = []
        for v in op.operands:
            ref = local.get(v)
            if ref is None:  # a constant or iota, copied in
                i = index[v][0]
                if i not in constants:
                    constants[i] = _op_text(ops[i], {})
                ref = ("free", constants[i])
            refs.append(ref)
        sig.append((_op_text(op, {}), tuple(refs)))
        for r, v in enumerate(op.results):
            local[v] = (n, r)
    sig.append(tuple(local[v] for v in outputs))
    return tuple(sig)


def _op_text(op: Any, names: dict) -> tuple:
    """An operation without its operands' names: name, attributes, result types, and regions
    (whose values are named by their place in the region)."""
    attrs = tuple(sorted((a.name, str(a.attr)) for a in op.attributes))
    regions = []
    for region in op.regions:
        for b, block in enumerate(region.blocks):
            for k, a in enumerate(block.arguments):
                names[a] = ("block", len(names), b, k)
            body = []
            for n, inner in enumerate(block.operations):
                inner = inner.operation
                body.append((_op_text(inner, names), tuple(names.get(v, ("outer",)) for v in inner.operands)))
                for r, v in enumerate(inner.results):
                    names[v] = ("value", len(names), r)
            regions.append(tuple(body))
    return (op.name, attrs, tuple(str(v.type) for v in op.results), tuple(regions))


def _build(ops: list, members: list[int], inputs: list, outputs: list, index: dict, others: list) -> Any:
    """A module whose ``main`` is a copy of the segment, with the constants it reads and the
    module's other functions."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        for f in others:
            f.clone()
        ftype = ir.FunctionType.get([v.type for v in inputs], [v.type for v in outputs])
        func = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get("main"), "function_type": ir.TypeAttr.get(ftype)})
    block = func.regions[0].blocks.append(*[v.type for v in inputs])
    mapped: dict[Any, Any] = dict(zip(inputs, block.arguments))
    with ir.InsertionPoint(block):
        for i in members:
            op = ops[i]
            for v in op.operands:
                if v not in mapped:  # a constant or iota: a copy of it
                    mapped[v] = ops[index[v][0]].clone().results[0]
            copy = op.clone()
            for j, v in enumerate(op.operands):
                copy.operands[j] = mapped[v]
            for v, c in zip(op.results, copy.results):
                mapped[v] = c
        ir.Operation.create("func.return", operands=[mapped[v] for v in outputs])
    return module
