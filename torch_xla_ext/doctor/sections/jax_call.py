"""The doctor's call_jax section: ``jax_call.explain`` on the embedded block's JAX gate."""

from __future__ import annotations

import dataclasses

from torch_xla_ext.doctor.block import gate

__all__ = ["jax_call_section"]


def jax_call_section(model, inputs) -> tuple[str, str, dict]:
    import torch_xla  # the section's own stack (torch_xla), not needed to import the doctor

    from torch_xla_ext import jax_call  # refused with what this stack lacks: a finding

    dev = torch_xla.device()
    x = inputs[0].to(dev)
    mapping = jax_call.explain(gate, (x, x, model.unused.to(dev)))
    kept = [r.path for r in mapping.rows if r.kept]
    dropped = [r.path for r in mapping.rows if r.kind == "tensor" and not r.kept]
    summary = f"{len(mapping.rows)} leaves -> {mapping.num_hlo_params} HLO parameters; unused: {', '.join(dropped) or 'none'}"
    md = ["The block's JAX gate `_gate(h, x, unused)` as `jax_call.call_jax` lowers it", "",
          "```", str(mapping), "```"]
    data = {"num_hlo_params": mapping.num_hlo_params, "kept": kept, "dropped": dropped,
            "rows": [dataclasses.asdict(r) for r in mapping.rows], "cache": jax_call.cache_info()._asdict()}
    return summary, "\n".join(md), data
