"""`run`: a bundle's `main` on PJRT CPU devices through jaxlib, without torch, every argument
assembled from the manifest. Runs on a CPU client of our own (one per replica count, kept for the
process), so it neither reads nor changes the process's JAX configuration: int64/float64 values
keep their dtype with ``jax_enable_x64`` off, and ``num_replicas`` may change from call to call.

Example:
    >>> import torch
    >>> from torch_xla_ext import export
    >>> x = torch.randn(2, 4)
    >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
    >>> [o.shape for o in run(bundle, x.numpy())]                     # [out0, ...]
    [(2, 4)]
    >>> r0, r1 = run(bundle, (x.numpy(),), (x.numpy(),), num_replicas=2)   # [[replica 0's], [replica 1's]]
    >>> bool((r0[0] == r1[0]).all())
    True
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any, Sequence

import numpy as np

from torch_xla_ext import _versions
from torch_xla_ext._cache import MakeOnceCache
from torch_xla_ext._compat import jax_mlir
from torch_xla_ext.errors import first_line
from torch_xla_ext.export.bundle import Bundle, as_bundle
from torch_xla_ext.export.errors import BundleError, RunInputError
from torch_xla_ext.export.files import MODULE_FILE
from torch_xla_ext.export.manifest import MANIFEST_FILE, PYTHON_PREFIX, dtype_name, is_python_constant, np_dtype
from torch_xla_ext.export.program import mlir_module

# Compiled programs by (text digest, replicas), the least recently run going first: an executable
# holds XLA's compiled code (and inlined values' buffers) for as long as it is cached.
MAX_EXECUTABLES = 16
EXECUTABLES = MakeOnceCache(MAX_EXECUTABLES)


def _executable(text: str, resources: dict[str, np.ndarray], n: int):
    """(client, executable, names): `main` compiled for n replicas, the inlined values it has at
    its top (inline_constants') taken as trailing arguments, `names` saying which: compiled as
    literals, 124M of weights peaked above 3x their size; passed, they cost what weights do.
    Compiled once per program (the cache's lock is not held while XLA compiles)."""
    # Inlined values are named by a digest of their bytes (program.resource_name), so the text
    # identifies the program.
    key = (hashlib.sha256(text.encode()).hexdigest(), n)

    def compile_main():
        client = jax_mlir.cpu_client(n)
        ctx, module, names = mlir_module(text, resources, MODULE_FILE, as_arguments=True)
        with ctx:
            code = jax_mlir.module_to_bytecode(module)
        del module, ctx  # XLA reads the bytecode
        try:
            exe = jax_mlir.compile_replicated(client, code, n)
        except RuntimeError as e:  # parses and verifies, but XLA cannot compile it
            raise BundleError(f"{MODULE_FILE}: XLA cannot compile main ({first_line(e)})") from None
        return client, exe, names

    return EXECUTABLES.get(key, compile_main)


def _same_constant(given: Any, value: Any) -> bool:
    if isinstance(given, np.ndarray) and given.ndim == 0 or isinstance(given, np.generic):
        given = given.item()
    if isinstance(value, float) and isinstance(given, float) and math.isnan(value):
        return math.isnan(given)
    return type(given) is type(value) and given == value


def _arguments(bundle: Bundle, user_inputs: Sequence[Any], replica: int | None) -> list[np.ndarray]:
    m = bundle.manifest
    where = "user_inputs" if replica is None else f"user_inputs[{replica}]"
    if len(user_inputs) != m.num_user_inputs:
        raise RunInputError(f"{where}: expected {m.num_user_inputs} user inputs (the leaves of (args, "
                            f"kwargs)), got {len(user_inputs)}")
    for u in m.unused_inputs:
        # A Python constant was baked into the program by torch.export: another value would be
        # silently ignored, so say so.
        given = user_inputs[u["position"]]
        if is_python_constant(u["dtype"]) and "value" in u and not _same_constant(given, u["value"]):
            name = f" ({u['name']})" if u.get("name") else ""
            raise RunInputError(f"{where}[{u['position']}]{name}: the program was exported with the Python "
                                f"constant {u['value']!r} ({u['dtype'][len(PYTHON_PREFIX):]}), which torch.export "
                                f"baked in; got {given!r}")
    args = []
    for inp in m.inputs:
        if inp.kind == "user_input":
            a = np.asarray(user_inputs[inp.position])
            if list(a.shape) != inp.shape or dtype_name(a.dtype) != inp.dtype:
                name = f" ({inp.name})" if inp.name else ""
                raise RunInputError(f"{where}[{inp.position}]{name}: expected {inp.dtype}{inp.shape}, "
                                    f"got {dtype_name(a.dtype)}{list(a.shape)}")
        elif inp.kind == "collective_token":
            try:
                a = np.asarray(inp.value, dtype=np_dtype(inp.dtype))
            except (ValueError, OverflowError, TypeError) as e:  # NaN or out of range for an integer dtype
                raise BundleError(f"{MANIFEST_FILE}: field 'inputs[{inp.index}].value' {inp.value!r} is not "
                                  f"a {inp.dtype}: {e}") from None
        else:
            a = bundle.arrays[inp.file]
        args.append(np.ascontiguousarray(a))
    return args


def run(bundle_or_dir: Bundle | str | os.PathLike, *user_inputs: Any, num_replicas: int = 1) -> list:
    """Runs `main` on PJRT CPU devices (jaxlib; no torch), assembling every argument from the
    manifest.

    `user_inputs` are the leaves of the example `(args, kwargs)` in order (unused ones and Python
    constants included; see ``manifest.user_inputs()``), as numpy arrays of the manifest's dtype:
    int64 stays int64 whatever ``jax_enable_x64`` says. With num_replicas=N, pass N per-replica
    tuples; the result is then one list of outputs per replica, and collectives run across N CPU
    devices. Any N works at any time in a process (each N gets its own CPU client).

    Example:
        >>> import torch
        >>> from torch_xla_ext import export
        >>> x = torch.randn(2, 4)
        >>> bundle = export.export(torch.nn.Linear(4, 4), (x,))
        >>> [o.dtype for o in run(bundle, x.numpy())]                     # [out0, ...]
        [dtype('float32')]
        >>> [len(r) for r in run(bundle, (x.numpy(),), (x.numpy(),), num_replicas=2)]   # [[out0 on replica 0], [... 1]]
        [1, 1]
    """
    _versions.require("export.jax")
    bundle = as_bundle(bundle_or_dir, "bundle_or_dir")
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
        raise RunInputError(f"num_replicas: expected an int >= 1, got {num_replicas!r}")
    exported_for = bundle.manifest.num_replicas
    if exported_for is not None and num_replicas != exported_for:
        raise RunInputError(f"num_replicas: the program computes for {exported_for} replica(s) only ({MANIFEST_FILE} "
                            f"field 'num_replicas': an average divides by the replica count it was exported "
                            f"for); got {num_replicas}")
    if num_replicas == 1:
        per_replica = [_arguments(bundle, user_inputs, None)]
    else:
        if len(user_inputs) != num_replicas:
            raise RunInputError(f"user_inputs: expected {num_replicas} per-replica tuples, got {len(user_inputs)}")
        for r, u in enumerate(user_inputs):
            if not isinstance(u, (tuple, list)):
                raise RunInputError(f"user_inputs[{r}]: expected a tuple of replica {r}'s user inputs, "
                                    f"got {type(u).__name__}")
        per_replica = [_arguments(bundle, tuple(u), r) for r, u in enumerate(user_inputs)]
    client, exe, names = _executable(bundle.module_text, bundle.resources, num_replicas)
    if names:
        values = [np.ascontiguousarray(bundle.resources[k]) for k in names]
        per_replica = [args + values for args in per_replica]
    by_replica = jax_mlir.execute_replicated(client, exe, per_replica)
    return by_replica[0] if num_replicas == 1 else by_replica
