"""One line of advice per compile, from what triggered it and what changed (the one copy of these
rules; the report adds the site-level ones: a site compiling every step, no new graphs after a step).

Example:
    >>> from torch_xla_ext.trace.schema import Trigger
    >>> changed = [{"what": "input", "old": [4, 16], "new": [4, 24], "role": "user_input"}]
    >>> lazy(Trigger(kind="sync"), changed, earlier_at_site=1)
    'Input shapes vary ([4, 16] -> [4, 24]): pad them to a few fixed sizes (buckets) so each compiles once.'
"""

from __future__ import annotations

from typing import Any

from torch_xla_ext.trace.schema import Trigger

__all__ = ["dynamo", "lazy"]

_INPUT_ROLES = ("user_input", "local")


def lazy(trigger: Trigger, changed: list[dict[str, Any]], earlier_at_site: int) -> str:
    """The advice for one lazy compile: what triggered it, what changed (``Compile.changed``),
    and how many compiles its site had before."""
    kind, op = trigger.kind, trigger.op
    if kind in ("dynamo", "dynamo_inputs", "dynamo_run"):
        return ""
    if earlier_at_site == 0:
        if kind == "host_read":
            what = f".{op}()" if op in ("item", "tolist", "cpu", "numpy") else (op or "a host read")
            return (f"A host read ({what}) before the step's sync compiles and runs the graph so far on its own: "
                    "read values after torch_xla.sync(), every N steps, or in xm.add_step_closure.")
        return ""
    whats = {c["what"] for c in changed}
    opt_state = [c for c in changed if c.get("role") == "optimizer_state"
                 and (c["what"] == "tensor_appeared" or (c["what"] == "inputs" and c["new"] > c["old"]))]
    if opt_state:
        c = opt_state[0]
        n = c["count"] if c["what"] == "tensor_appeared" else c["new"] - c["old"]
        return (f"The optimizer's state ({n} more inputs) appeared after its first step: one more graph, once; "
                "nothing to change.")
    shapes = [c for c in changed if c["what"] == "input" and c.get("old") != c.get("new")] + \
        [c for c in changed if c["what"] == "tensor_shape" and c.get("role") in _INPUT_ROLES]
    if shapes:
        c = shapes[0]
        old, new = c.get("old") or [], c.get("new") or []
        if old and new and len(old) == len(new) and new[0] < old[0] and list(old[1:]) == list(new[1:]):
            return (f"A shorter batch ({old} -> {new}), such as a DataLoader's last: drop_last=True, or pad it to "
                    "the full batch, avoids its compile.")
        return f"Input shapes vary ({old} -> {new}): pad them to a few fixed sizes (buckets) so each compiles once."
    if "constant" in whats:
        c = next(c for c in changed if c["what"] == "constant")
        where = f" ({c['op']} at {c['site']})" if c.get("site") else f" ({c['op']})"
        if "(an input)" in (str(c["old"]), str(c["new"])):
            return (f"A Python number{where} went from {c['old']} to {c['new']}: torch_xla compiles 0 and 1 in "
                    "as constants and passes other numbers as inputs, so a value reaching or leaving 0 or 1 (a "
                    "learning rate warming up from 0) makes another graph; start it off 0, or pass it as a tensor.")
        return (f"A Python number is compiled into the graph as a constant{where}: {c['old']} -> {c['new']}; pass "
                "it as a tensor on the device so it becomes an input, or keep it fixed.")
    if "op" in whats:
        c = next(c for c in changed if c["what"] == "op")
        where = c.get("new_site") or c.get("old_site") or ""
        return ("The step traces other ops than before" + (f" (first at {where})" if where else "") +
                ": each code path through the step (an optimizer step every N micro-batches, logging every N "
                "steps) is its own graph and compiles once; a path that changes every step compiles every step.")
    if "inputs" in whats or "outputs" in whats:
        return ("The graph has other inputs or outputs than before: a tensor the step creates or keeps changes "
                "between steps; keep the same tensors alive at every sync.")
    if "not_captured" in whats:
        if kind == "host_read":
            return ("A host read's graph runs before the trace can read it, so it is not compared op by op; the "
                    "input that changed is not held in a variable in scope. Reading values after the step's sync "
                    "leaves one graph per step to compare.")
        return ("Not captured: run with --capture all (slower) to compare this graph op by op with the earlier one.")
    return ""


def dynamo(recompile_reason: str | None, breaks: int = 0) -> str:
    """The advice for a Dynamo compile: its failed guard, else its breaks."""
    if recompile_reason:
        r = recompile_reason.lower()
        if "size" in r or "shape" in r or "stride" in r:
            return ("A guard on a tensor's size failed: mark the dimension dynamic "
                    "(torch._dynamo.mark_dynamic) or keep the shape fixed (pad to buckets).")
        if "id(" in r or "___check_obj_id" in r:
            return "A guard on an object's identity failed: pass the same object every call, or a tensor."
        return "A guard failed (" + recompile_reason.splitlines()[0][:120] + "): keep what it checks the same."
    if breaks:
        return "Graph breaks split the function: see each break's hint."
    return ""
