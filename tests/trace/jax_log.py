"""JAX's own words about its compiles (``oracle_run.py``'s ``jax_log``: ``JAX_LOG_COMPILES`` and
``JAX_EXPLAIN_CACHE_MISSES``, captured inside the traced process), read by the tests' own rules and
held against the trace's report. Shares nothing with the recorder: it reads log text, never the
rank files; no torch_xla_ext import, so a venv test can load it by path.

* :func:`finished`: the JAX name of every XLA compile, in the order JAX logged them ("Finished XLA
  compilation of jit(f) in t sec": one line per compile). The k-th is the trace's compile k of
  that process (both count from the process's first compile, in order).
* :func:`explained`: what one "TRACING CACHE MISS" explanation says changed, in JAX's words, on
  jax 0.7.1 (every closest key, "costing ... because") and 0.12 (one closest key, input paths).
* :func:`agreement`: for every compile of a jitted function in the report, JAX's explanation of
  the same compile (the last one for the same function logged since the function's previous
  compile) against the report's ``changed``; one verdict each.
"""

import collections
import re

FINISHED = re.compile(r"^Finished XLA compilation of (.+) in [0-9.e+-]+ sec")
_AT = re.compile(r"^\s*\* at (.+?), now (.+?) and before (.+?)$")


def finished(log):
    """[(index in the log, JAX name)] of every "Finished XLA compilation" line, in order."""
    out = []
    for i, r in enumerate(log):
        m = FINISHED.match(r["message"])
        if m:
            out.append((i, m.group(1)))
    return out


def counts(log):
    """{JAX name: compiles} from the log."""
    return collections.Counter(name for _, name in finished(log))


def miss_function(msg):
    """The function a cache-miss explanation is about ("call_torch" for every torchax function)."""
    m = re.search(r"never seen function:\n\s+(\S+) id=", msg) or re.search(r"^\s+for (\S+) defined at", msg, re.M)
    return m.group(1) if m else None


def explained(msg):
    """("new", None) | ("types", [set of (name, now, before)] per closest key) | ("pytree", (containers,
    text)) | ("static", (now, before)) | ("unavailable", None) | ("other", text)."""
    if "never seen function" in msg:
        return "new", None
    if "different input pytree" in msg or "different number of args and kwargs" in msg:
        at = set(re.findall(r"^\s*\* at (\S+?), now", msg, re.M))
        # jax 0.12 names a container by its input path: [1] is kwargs, [0][i] is args[i]
        at |= {re.sub(r"^\[0\]", "args", re.sub(r"^\[1\]", "kwargs", p))
               for p in re.findall(r"\* at input path (\S+?), now", msg)}
        at.discard("input")
        return "pytree", (at, msg)
    if "different value of static args" in msg or "different value of static kwargs" in msg:
        m = re.search(r"now (.+) and before (.+)$", msg, re.M)
        return "static", m.groups() if m else None
    if "explanation unavailable" in msg and "different " not in msg:
        return "unavailable", None  # jax 0.12 for a static argument's new value
    if "different input types" in msg:
        blocks = msg.split("* key with ")[1:] if "* key with " in msg else [msg]  # 0.7.1: one block per closest key
        keys = []
        for block in blocks:
            rows = (m.groups() for m in map(_AT.match, block.splitlines()) if m)
            keys.append({(a, b, c.split("https://")[0]) for a, b, c in rows})  # 0.12 glues the weak-type hint on
        return "types", keys
    return "other", msg


def _jax_types(changed):
    return {(c["jax_name"], c["now"], c["before"]) for c in changed if c.get("what") == "input" and "jax_name" in c}


def verdict(kind, what, row):
    """Whether the report's row says what JAX's explanation says: True, "tie" (JAX 0.12 shows one
    of several closest earlier keys: the same inputs changed to the same new types), "unverified"
    (JAX explains nothing), or False."""
    changed = row["changed"]
    if kind == "new":
        return row["previous_step"] is None and all(c["what"] == "new_function" for c in changed)
    if kind == "types":
        mine = _jax_types(changed)
        if any(mine == key for key in what):
            return True
        if len(what) == 1:
            (key,) = what
            if {(n, now) for n, now, _ in mine} == {(n, now) for n, now, _ in key}:
                return "tie"
        return False
    if kind == "pytree":
        at, text = what
        mine = [c for c in changed if c.get("what") == "structure"]
        return bool(mine) and all(c["jax_name"] in at and all(f"'{k}'" in text for k in c["added"] + c["removed"])
                                  for c in mine)
    if kind == "static":
        mine = [(c["now"], c["before"]) for c in changed if c.get("what") == "static"]
        return what is not None and mine == [tuple(what)]
    if kind == "unavailable":
        return "unverified"
    return False


def agreement(log, rows):
    """One entry per compile of a jitted function among ``rows`` (report.json's compiles of one
    process): {k, function, call, kind, jax (what JAX said), verdict}. JAX's explanation of the
    compile is the last one about the same function logged after that function's previous compile
    and before this one's "Finished" line."""
    done = finished(log)
    out = []
    last_at = collections.defaultdict(lambda: -1)  # function (JAX's inner name) -> log index of its last compile
    for row in sorted(rows, key=lambda r: r["k"]):
        if row["eager"] or row["trigger"]["kind"] != "jit":
            continue
        index, name = done[row["k"] - 1]
        inner = re.sub(r"^jit\((.*)\)$", r"\1", name)
        misses = [r["message"] for r in log[last_at[inner] + 1:index]
                  if r["message"].startswith("TRACING CACHE MISS") and miss_function(r["message"]) == inner]
        last_at[inner] = index
        if not misses:
            out.append({"k": row["k"], "function": row["trigger"]["function"], "call": row["call"], "kind": None,
                        "jax": None, "verdict": False})
            continue
        kind, what = explained(misses[-1])
        out.append({"k": row["k"], "function": row["trigger"]["function"], "call": row["call"], "kind": kind,
                    "jax": what if kind != "pytree" else sorted(what[0]), "verdict": verdict(kind, what, row)})
    return out


def check(log, rows, ranks_row):
    """The report's compiles of one process (``rows``; ``ranks_row``: its row of ``ranks``) against
    JAX's log of it: the k-th compile is JAX's k-th "Finished XLA compilation" of the same JAX name,
    the totals are equal, each compiled function's compiles are JAX's compiles of its program (the
    jitted functions' own names: torchax's are all ``call_torch``), and every "what changed" agrees
    with JAX's explanation of the same compile. Returns the agreement entries."""
    done = [name for _, name in finished(log)]
    ours = [r["name"] for r in sorted(rows, key=lambda r: r["k"])]
    assert ours == done, (ours, done)
    assert ranks_row["compiles"] == len(done) > 0
    assert ranks_row["op_by_op"] == sum(r["eager"] for r in rows)
    jitted = [r for r in rows if not r["eager"] and r["trigger"]["kind"] == "jit"]
    assert collections.Counter(r["name"] for r in jitted) == {n: c for n, c in counts(log).items() if n in {r["name"] for r in jitted}}
    found = agreement(log, rows)
    assert len(found) == len(jitted)
    bad = [a for a in found if a["verdict"] not in (True, "tie")]
    assert not bad, bad
    return found
