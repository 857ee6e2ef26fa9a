"""Localisation over a matrix of planted bugs: false-positive and false-negative rates.

For every model (the zoo, plus transformers/torchvision architectures built from their configs),
dtype (bf16, fp32) and plan (no bug; one weight scaled by 1+eps for a spread of weights — the
embedding, first and middle linear or conv, first norm — and eps in 2%, 5%, 25%; one
activation swapped for a close one), the model with the bug runs on XLA, the untouched one is the
reference, and the localisation's flags are scored:

* found: the first divergent module is the planted one (a false negative otherwise);
* false flags: flagged module calls that neither are nor contain the planted module (every flag on
  an unperturbed model is one);
* effect: the bug's own size on its module's output (fp64, on XLA's inputs) over that call's
  rounding level; a bug whose effect is below the threshold is below what rounding lets anyone see.

Each run's modules (own error, CPU eager's rounding, scale) are written as JSON lines, so the rule's
constants can be re-derived from the same runs (``--rescore``).

    PYTHONPATH=. PJRT_DEVICE=CPU .venv/bin/python bench/localize_matrix.py [--models gpt2,llama]
        [--dtypes bf16,fp32] [--out /tmp/localize_matrix.jsonl]
    .venv/bin/python bench/localize_matrix.py --rescore /tmp/localize_matrix.jsonl --factor 4 --floor 1
"""

from __future__ import annotations

import argparse
import json
import math
import time


def extra_models() -> dict:
    """Architectures outside the zoo, from their libraries' configs (random init, nothing downloaded)."""
    import torch

    def qwen2():
        from transformers import Qwen2Config, Qwen2ForCausalLM
        torch.manual_seed(0)
        cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=512, max_position_embeddings=64, use_cache=False)
        m = Qwen2ForCausalLM(cfg).eval()
        return m, (torch.randint(0, 512, (2, 16)),), {"attention_mask": torch.ones(2, 16, dtype=torch.long)}

    def mistral():
        from transformers import MistralConfig, MistralForCausalLM
        torch.manual_seed(0)
        cfg = MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=512, max_position_embeddings=64, use_cache=False)
        m = MistralForCausalLM(cfg).eval()
        return m, (torch.randint(0, 512, (2, 16)),), {"attention_mask": torch.ones(2, 16, dtype=torch.long)}

    def gpt_neo():
        from transformers import GPTNeoConfig, GPTNeoForCausalLM
        torch.manual_seed(0)
        cfg = GPTNeoConfig(hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                           vocab_size=512, max_position_embeddings=64, intermediate_size=128, use_cache=False)
        m = GPTNeoForCausalLM(cfg).eval()
        return m, (torch.randint(0, 512, (2, 16)),), {"attention_mask": torch.ones(2, 16, dtype=torch.long)}

    def shufflenet():
        import torchvision
        torch.manual_seed(0)
        m = torchvision.models.shufflenet_v2_x0_5(weights=None).eval()
        return m, (torch.randn(2, 3, 32, 32),), {}

    def squeezenet():
        import torchvision
        torch.manual_seed(0)
        m = torchvision.models.squeezenet1_1(weights=None).eval()
        return m, (torch.randn(2, 3, 64, 64),), {}

    return {"qwen2": qwen2, "mistral": mistral, "gpt_neo": gpt_neo, "shufflenet": shufflenet,
            "squeezenet": squeezenet}


def build(name: str):
    extra = extra_models()
    if name in extra:
        return extra[name]()
    from tests import zoo
    return zoo.build(name)


def run(name: str, dtype: str, out, epsilons) -> None:
    from tests.parity import planted
    from torch_xla_ext import parity

    model, args, kwargs = build(name)
    cases = [None] + planted.plans(model, epsilons)
    for plan in cases:
        t0 = time.perf_counter()
        broken = model if plan is None else planted.plant(model, plan)
        cap = parity.capture(broken, args, kwargs, dtype=dtype)
        r = parity.compare_capture(cap, model, args, kwargs, emulate=False)
        path = None if plan is None else plan[1]
        bugged = planted.owners(model, plan)
        first = next((m for m in r.modules if m.diverges), None)
        effect_abs = None if plan is None else planted.planted_effect(model, broken, cap, path)
        entry = None if plan is None else next(m for m in r.modules if m.path == path and m.call == 0)
        effect = None if plan is None else (effect_abs / entry.rounding_level if entry.rounding_level else math.inf)
        row = {
            "model": name, "dtype": dtype, "plan": list(plan) if plan else None,
            "first": first.path if first else None,
            "found": None if plan is None else (first is not None and first.path == path),
            "planted_paths": list(bugged),
            "false_flags": [m.name for m in r.modules if m.diverges and not planted.allowed(m.path, bugged)],
            "effect": effect, "effect_abs": effect_abs, "seconds": round(time.perf_counter() - t0, 2),
            "modules": [[m.path, m.call, m.own_error, m.cpu_rounding, m.scale] for m in r.modules],
            "eps": _eps(dtype),
        }
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(f"{name:11s} {dtype} {str(plan):58s} first={row['first']} found={row['found']} "
              f"false={len(row['false_flags'])} effect={effect if effect is None else round(effect, 2)} "
              f"{row['seconds']}s", flush=True)


def _eps(dtype: str) -> float:
    import torch
    from torch_xla_ext.parity.casts import torch_dtype
    return float(torch.finfo(torch_dtype(dtype)).eps)


def _holders(model, plan) -> set:
    """The planted module and the modules tied to it (the first divergent module may be any)."""
    import torch

    modules = dict(model.named_modules())
    if plan[0] != "weight":
        return {plan[1]}
    w = modules[plan[1]].weight
    return {p for p, m in modules.items() if isinstance(w, torch.nn.Parameter)
            and any(q is w for q in m.parameters(recurse=False))}


def rescore(path: str, factor: float | None, floor: float) -> dict:
    """FP/FN rates of the rule ``own > factor * max(cpu_rounding, floor * eps/2 * scale)`` (factor
    None: the library's, per dtype)."""
    import planted

    from torch_xla_ext.parity.casts import torch_dtype
    from torch_xla_ext.parity.stages import localization

    rows = [json.loads(l) for l in open(path)]
    models: dict = {}
    stats = {}
    worst_clean = []
    for r in rows:
        key = r["dtype"]
        f = localization.divergence_factor(torch_dtype(key)) if factor is None else factor
        s = stats.setdefault(key, {"runs": 0, "clean_runs": 0, "clean_flagged": 0, "planted": 0, "found": 0,
                                   "resolvable": 0, "resolvable_found": 0, "false_flag_runs": 0, "calls": 0,
                                   "false_calls": 0, "missed": []})
        s["runs"] += 1
        planted_path = r["plan"][1] if r["plan"] else None
        if r["model"] not in models:  # which modules hold or contain the bug, from the model itself
            models[r["model"]] = build(r["model"])[0]
        bugged = planted.owners(models[r["model"]], r["plan"])
        first, false = None, 0
        for p, call, own, cpu, scale in r["modules"]:
            level = max(cpu, floor * r["eps"] / 2 * scale)
            ratio = 0.0 if own == 0 else (own / level if level > 0 else math.inf)
            flagged = ratio > f
            if not planted.allowed(p, bugged):
                worst_clean.append((ratio, r["model"], r["dtype"], p))
            s["calls"] += 1
            if flagged and first is None:
                first = p
            if flagged and not planted.allowed(p, bugged):
                false += 1
        s["false_calls"] += false
        s["false_flag_runs"] += bool(false)
        if r["plan"] is None:
            s["clean_runs"] += 1
            s["clean_flagged"] += bool(false)
            continue
        s["planted"] += 1
        found = first in _holders(models[r["model"]], r["plan"])
        s["found"] += found
        levels = {(p, c): max(cpu, floor * r["eps"] / 2 * scale) for p, c, own, cpu, scale in r["modules"]}
        level = levels.get((planted_path, 0), 0.0)
        effect = r["effect_abs"] / level if level else math.inf
        resolvable = not math.isnan(effect) and effect > f
        s["resolvable"] += resolvable
        s["resolvable_found"] += found and resolvable
        if not found:
            s["missed"].append((r["model"], r["plan"], first, round(effect, 2)))
    worst_clean.sort(reverse=True)
    return {"stats": stats, "worst_unplanted_ratios": worst_clean[:12]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen2,gpt2,llama,bert,t5,vit,clip,mobilenet_v3,resnet18")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--epsilons", default="0.02,0.05,0.25")
    ap.add_argument("--out", default="localize_matrix.jsonl")
    ap.add_argument("--rescore")
    ap.add_argument("--factor", type=float)
    ap.add_argument("--floor", type=float)
    a = ap.parse_args()
    if a.rescore:
        from torch_xla_ext.parity.stages import localization
        floor = localization.FLOOR_ULPS if a.floor is None else a.floor
        print(json.dumps(rescore(a.rescore, a.factor, floor), indent=1, default=str))
        return
    eps = tuple(float(e) for e in a.epsilons.split(","))
    with open(a.out, "a") as out:
        for name in a.models.split(","):
            for dtype in a.dtypes.split(","):
                run(name, dtype, out, eps)
                # the next run starts from a clean torch_xla compile cache only in a fresh process;
                # within one, XLA's cache is shared, which is what a user's session does too


if __name__ == "__main__":
    main()
