"""Chrome trace events (ui.perfetto.dev, chrome://tracing) laid out so that the complete events
(``ph: "X"``) of one thread nest, as a trace processor requires.

Our writers put each kind of work on its own thread (XLA executions, compiles, Dynamo frames).
Work of one kind can overlap in time: torch_xla executes graphs asynchronously, so one graph's
execution can start before the previous one has ended; two JAX compiles can run on two threads.
A trace processor rejects (or silently drops) a slice that starts inside another on the same
thread and ends after it, so such a slice goes on a second lane of that thread, a thread of its
own named ``"<thread> (2)"`` beside the first: what ran concurrently is drawn concurrently, and
nothing is clipped or lost.

Example:
    >>> evs = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "xla execute"}},
    ...        {"ph": "X", "name": "execute", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
    ...        {"ph": "X", "name": "execute", "pid": 1, "tid": 1, "ts": 5.0, "dur": 10.0}]
    >>> [(e["tid"], e["args"]["name"]) for e in nest_on_threads(evs) if e["name"] == "thread_name"]
    [(1, 'xla execute'), (2, 'xla execute (2)')]
"""

from __future__ import annotations

from typing import Any

__all__ = ["nest_on_threads", "lanes"]

# Timestamps and durations are written in microseconds rounded to 3 decimals: an end can be off
# by up to a nanosecond from its true value, and that much is not an overlap.
_ROUNDING_US = 1e-3


def lanes(slices: list[tuple[float, float]]) -> list[int]:
    """The lane (0, 1, ...) of each ``(ts, dur)`` slice of one thread: on every lane, any two slices
    either follow each other or nest. The first lane takes every slice it can, in start order."""
    order = sorted(range(len(slices)), key=lambda i: (slices[i][0], -slices[i][1]))
    stacks: list[list[float]] = []  # per lane, the end times of the slices still open
    lane_of = [0] * len(slices)
    for i in order:
        ts, dur = slices[i]
        end = ts + dur
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= ts + _ROUNDING_US:
                stack.pop()
            if not stack or end <= stack[-1] + _ROUNDING_US / 2:
                break
        else:
            k, stack = len(stacks), []
            stacks.append(stack)
        stack.append(end)
        lane_of[i] = k
    return lane_of


def nest_on_threads(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with every complete event that would overlap another on its thread moved to a
    further lane of that thread (a new ``tid``, named and sorted next to the first). Events are
    not changed in place; their order is kept, the new threads' metadata comes after them."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    sort_index = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events
                  if e.get("ph") == "M" and e.get("name") == "thread_sort_index"}
    by_thread: dict[tuple[int, int], list[int]] = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(i)
    next_tid = {}
    for e in events:
        if "tid" in e:
            next_tid[e["pid"]] = max(next_tid.get(e["pid"], 0), e["tid"] + 1)
    moved: dict[int, int] = {}
    meta: list[dict[str, Any]] = []
    for (pid, tid), idx in sorted(by_thread.items()):
        lane_of = lanes([(events[i]["ts"], events[i]["dur"]) for i in idx])
        lane_tid = {0: tid}
        for i, k in zip(idx, lane_of):
            if k not in lane_tid:
                lane_tid[k] = next_tid[pid]
                next_tid[pid] += 1
                name = f"{names.get((pid, tid), f'thread {tid}')} ({k + 1})"
                meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane_tid[k], "args": {"name": name}})
                if (pid, tid) in sort_index:
                    meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": lane_tid[k],
                                 "args": {"sort_index": sort_index[(pid, tid)]}})
            if k:
                moved[i] = lane_tid[k]
    out = [dict(e, tid=moved[i]) if i in moved else e for i, e in enumerate(events)]
    return out + meta
