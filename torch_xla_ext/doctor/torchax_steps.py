"""The program the doctor's compiles section traces: a ``module:factory``'s model moved to torchax's
device, compiled with ``torchax.compile`` and called ``steps`` times on its inputs, as a torchax
serving loop calls it. Run as ``python -m torch_xla_ext.doctor.torchax_steps SPEC STEPS`` under
``torch-xla-ext trace`` (:mod:`.sections.compiles`)."""

from __future__ import annotations

import sys

import torch

from torch_xla_ext import _factory
from torch_xla_ext._compat import torchax_import


def main(argv: list[str]) -> int:
    spec, steps = argv[0], int(argv[1])
    torchax_import.install()  # as the doctor's gate imported it (a torch that removed ops torchax names)
    import torchax  # the frontend's stack: the doctor's gate checked it before starting this

    made = _factory.load_model(spec)
    env = torchax.default_env()
    with env, torch.no_grad():
        model = made.model.to("jax")
        args, kwargs = env.to_xla((tuple(made.args), dict(made.kwargs)))
        compiled = torchax.compile(model)
        for _ in range(steps):
            compiled(*args, **kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
