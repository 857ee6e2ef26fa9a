"""MLIR text in, modules out: the one parser of StableHLO text (export's bundles, parity's
programs, torch_xla's HLO converted by jaxlib), with the nesting guard every parse gets, and the
one conversion of an HloModuleProto to StableHLO text.

MLIR's parser recurses once per nesting level of types, attributes and regions: a module nested
deeply enough overflows the stack (a segfault), so text nested deeper than :data:`MAX_NESTING` is
refused before MLIR sees it. Real modules nest a few dozen levels. Imports JAX's MLIR bindings
only when parsing.

Example:
    >>> ctx, module = parse("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> { return %a : tensor<2xf32> }",
    ...                     "example", error=ValueError)
    >>> parse("func.func @main(", "broken.mlir", error=ValueError)
    Traceback (most recent call last):
    ...
    ValueError: broken.mlir: not a parsable StableHLO module (Unable to parse module assembly: error: "-":1:16: expected non-function type)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from torch_xla_ext._compat import jax_mlir
from torch_xla_ext.errors import first_line

__all__ = ["MAX_NESTING", "hlo_to_stablehlo_text", "nesting_depth", "parse"]

MAX_NESTING = 1000
_BRACKET_STEP = np.zeros(256, np.int8)
_BRACKET_STEP[[ord(c) for c in "([{<"]] = 1
_BRACKET_STEP[[ord(c) for c in ")]}>"]] = -1


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting outside string literals (an upper bound on parser recursion)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text).replace("->", "")
    step = _BRACKET_STEP[np.frombuffer(bare.encode("utf-8", "replace"), np.uint8)]
    return int(np.cumsum(step, dtype=np.int64).max(initial=0))


def parse(text: str | bytes, where: str, *, error: type[Exception], dialect_error: type[Exception] | None = None,
          syntax_error: type[Exception] | None = None) -> tuple[Any, Any]:
    """(context, module) of StableHLO text (or bytecode) in a context with every dialect JAX's
    lowering registers. Text nested deeper than MAX_NESTING raises ``error``; text MLIR rejects
    raises ``syntax_error`` (default ``error``), or ``dialect_error`` (default ``error``) when it
    uses a dialect the context does not register, naming the dialect. Every message names
    ``where``."""
    from jax.extend.mlir import ir  # JAX is imported when a module is parsed, not with this module

    if isinstance(text, str):
        depth = nesting_depth(text)
        if depth > MAX_NESTING:
            raise error(f"{where}: nested {depth} levels deep (more than {MAX_NESTING}); not parsed")
    ctx = jax_mlir.make_context()
    with ctx:
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            detail = first_line(e)
            dialect = jax_mlir.unknown_dialect(str(e))  # MLIR's text: matched in _compat
            if dialect:
                raise (dialect_error or error)(
                    f"{where}: uses the MLIR dialect '{dialect}', which JAX's MLIR context does not register, so "
                    f"the module cannot be loaded or run here ({detail})") from None
            raise (syntax_error or error)(f"{where}: not a parsable StableHLO module ({detail})") from None
    return ctx, module


def hlo_to_stablehlo_text(proto: bytes, where: str, *, error: type[Exception], debug_info: bool) -> str:
    """StableHLO text of a serialized HloModuleProto (jaxlib's public ``hlo_to_stablehlo``: XLA's
    own HLO importer); ``debug_info`` keeps the HLO instruction names as locations. ``error``
    naming ``where`` when jaxlib cannot convert it."""
    import jax  # as in parse
    from jax.extend.mlir import hlo_to_stablehlo

    try:
        bytecode = hlo_to_stablehlo(bytes(proto))
    except jax.errors.JaxRuntimeError as e:
        raise error(f"{where}: jaxlib's hlo_to_stablehlo cannot convert it ({first_line(e)})") from None
    ctx, module = parse(bytecode, f"{where}: hlo_to_stablehlo's output", error=error)
    with ctx:
        return module.operation.get_asm(enable_debug_info=debug_info, large_elements_limit=None)
