"""torchax made unimportable for the length of a ``with``: what torch_xla 2.9's stock ``call_jax``
meets in an install without flax. torch_xla's wheel ships its own copy of torchax whose
``__init__`` imports flax, so there ``import torchax`` raises ``ModuleNotFoundError: No module
named 'flax'`` and ``call_jax`` refuses ("Jax is required for this feature"). The tested stack pins
torchax 0.0.13 over that copy (it imports no flax), so the refusal is reproduced by raising the
same error for ``torchax`` and its submodules; ``torch_xla_ext.jax_call`` needs neither."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "torchax" or name.startswith("torchax."):
            raise ModuleNotFoundError("No module named 'flax'", name="flax")
        return None


@contextlib.contextmanager
def without_torchax() -> Iterator[None]:
    saved = {k: v for k, v in sys.modules.items() if k == "torchax" or k.startswith("torchax.")}
    for k in saved:
        del sys.modules[k]
    finder = _Refuse()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        sys.modules.update(saved)
