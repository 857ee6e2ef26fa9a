"""A torch function jitted through torchax, and JAX's names of its arguments in torch's terms.

JAX names a flat argument of a torchax function by its place in ``(args, kwargs)`` of the jitted
``call_torch``: ``args[0]['lm_head.weight']`` of a ``torchax.compile``d module is the parameter
``lm_head.weight`` (its first two arguments are the parameters and buffers dicts), ``args[2]`` its
first positional input, ``kwargs['position_ids']`` a keyword input; for a function jitted with
``interop.jax_jit``, ``args[i]`` is its i-th parameter. :meth:`Fn.torch_name` is that one rule,
with the role torch.export's words give it (``parameter``, ``buffer``, ``user_input``) and
``optimizer_state`` for an optimizer's state (an optax state, or an argument whose name says so).

Example:
    >>> fn = Fn(0, Target("GPT2LMHeadModel.forward", "", True, [("input_ids", "POSITIONAL_OR_KEYWORD")]))
    >>> fn.torch_name("args[2]"), fn.torch_name("args[0]['lm_head.weight']"), fn.torch_name("kwargs")
    (('input_ids', 'user_input'), ('lm_head.weight', 'parameter'), ('keyword arguments', 'user_input'))
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from torch_xla_ext._compat.torchax_interop import Target

__all__ = ["Fn", "Target", "optimizer_state_args"]

HISTORY = 64  # earlier signatures kept per function to compare a new one with
_NAME = re.compile(r"^(args|kwargs)(?:\[(\d+)\]|\['([^']*)'\])?(.*)$")
_FQN = re.compile(r"^\['([^']*)'\](.*)$")
_STATE_NAME = re.compile(r"opt|momentum|adam")
_PARAM_NAMES = ("params", "parameters", "weights")


class Fn:
    """One jitted torch function (one JAX cache): its name, calls and compiles, its earlier
    signatures (``history``: (k, call, signature)), and JAX's argument names in torch's terms."""

    def __init__(self, fid: int, target: Target, static_argnums: Any = (), static_argnames: Any = ()):
        self.id = fid
        self.target = target
        self.name = target.name
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums or ())
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
        self.calls = 0
        self.compiles = 0
        self.history: list[tuple[int, int, list[list[Any]]]] = []
        self.written = False  # its JitFunction record
        self.jitted_at: Any = None  # (function, file, line) of the user's line that jitted it
        self._offset = 2 if target.module else 0  # a module's jitted call: (params, buffers, *inputs)
        self._positional = [n for n, kind in target.params if kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
        self._varargs = next((n for n, kind in target.params if kind == "VAR_POSITIONAL"), None)

    def remember(self, k: int, call: int, sig: list[list[Any]]) -> None:
        self.history.append((k, call, sig))
        del self.history[:-HISTORY]

    def torch_name(self, jax_name: str, state_args: Sequence[int] = ()) -> tuple[str, str]:
        """(torch name, role) of a flat argument JAX names ``jax_name``; ``state_args``: the
        positions that hold an optimizer's state."""
        m = _NAME.match(jax_name)
        if not m:
            return jax_name, "user_input"
        base, index, key, rest = m.groups()
        if base == "kwargs":
            return (f"{key}{rest}" if key is not None else "keyword arguments"), "user_input"
        if index is None:
            return "positional arguments", "user_input"
        i = int(index)
        if self.target.module and i < 2:
            fqn = _FQN.match(rest)
            name, tail = (fqn.group(1), fqn.group(2)) if fqn else (rest.strip("[]'") or ("parameters", "buffers")[i], "")
            also = self.target.aliases.get(name, [])
            return name + tail + (f" (also {', '.join(also)})" if also else ""), ("parameter", "buffer")[i]
        j = i - self._offset
        if j < len(self._positional):
            name = self._positional[j]
        elif self._varargs is not None:
            name = f"{self._varargs}[{j - len(self._positional)}]"
        else:
            return f"argument {j}{rest}", "user_input"
        return name + rest, self._role(i, name, state_args)

    def _role(self, i: int, name: str, state_args: Sequence[int]) -> str:
        if i in state_args or _STATE_NAME.search(name.lower()):
            return "optimizer_state"
        if name in _PARAM_NAMES:
            return "parameter"
        if name == "buffers":
            return "buffer"
        return "user_input"


def optimizer_state_args(args: Sequence[Any]) -> list[int]:
    """The positions of ``args`` that hold an optax optimizer state (optax's state classes, or a
    tuple of them: what ``optimizer.init`` returns)."""
    out = []
    for i, a in enumerate(args):
        items = a if type(a) is tuple else (a,)
        if any(type(x).__module__.split(".")[0] == "optax" for x in items):
            out.append(i)
    return out
