"""One traced process's file: JSON lines, appended as events happen.

Each record is one ``os.write`` of one line to a descriptor opened with ``O_APPEND``: the line is
in the kernel's page cache when the call returns, so a process killed the next instant (SIGKILL,
the OOM killer) loses nothing it wrote, and two processes never interleave within a line. The
file is created at the first record (a process that never imports torch_xla or Dynamo leaves
none) and named by the process's rank: ``rank-<RANK>.jsonl`` (torchrun's ``RANK``, else
torch_xla's ordinal once its runtime started, else ``LOCAL_RANK``), or ``proc-<pid>.jsonl``. A
second process claiming the same rank in one directory gets ``rank-<r>.<pid>.jsonl``. After a
``fork`` the child writes its own file, never its parent's.

Records are the models of :mod:`~torch_xla_ext.trace.schema`; the header is written at the
first record.

Example:
    >>> import json, os, tempfile
    >>> from torch_xla_ext.trace.schema import Step
    >>> d = tempfile.mkdtemp()
    >>> f = RankFile(d, environ={"RANK": "3", "WORLD_SIZE": "4"})
    >>> f.write(Step(n=1, t=f.now_ms(), site=-1, kind="sync"))
    >>> os.path.basename(f.path)
    'rank-3.jsonl'
    >>> [json.loads(line)["ev"] for line in open(f.path)]
    ['header', 'step']
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Mapping, cast

from torch_xla_ext import _json
from torch_xla_ext.trace.schema import SCHEMA_MINOR, SCHEMA_VERSION, Header, to_json

__all__ = ["RankFile", "identity"]


def identity(environ: Mapping[str, str], ordinal: Callable[[], int | None] | None = None) -> dict[str, Any]:
    """Which process of a job this is: ``rank``/``world_size``/``local_rank`` and where the rank
    came from (``RANK`` from a launcher, torch_xla's ordinal, ``LOCAL_RANK``), or no rank."""
    ident: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "rank": None, "source": None}
    for key, name in (("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK")):
        v = _env_int(environ, name)
        if v is not None:
            ident[key] = v
    rank = _env_int(environ, "RANK")
    if rank is not None:
        ident.update(rank=rank, source="RANK")
        return ident
    r = None
    if ordinal is not None:
        try:
            r = ordinal()
        except RuntimeError:  # torch_xla's runtime cannot say yet: the other sources decide
            r = None
    if r is not None:
        ident.update(rank=r, source="torch_xla ordinal")
    elif "local_rank" in ident:
        ident.update(rank=ident["local_rank"], source="LOCAL_RANK")
    return ident


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    try:
        return int(environ[name])
    except (KeyError, ValueError):
        return None


class RankFile:
    """The append-only JSON-lines file of this process in ``directory`` (see the module)."""

    def __init__(self, directory: str, environ: Mapping[str, str] | None = None,
                 ordinal: Callable[[], int | None] | None = None):
        self.directory = directory
        self._environ = os.environ if environ is None else environ
        self._ordinal = ordinal
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = os.getpid()
        self._t0 = time.monotonic()
        self.path: str | None = None
        self.identity: dict[str, Any] | None = None

    def set_ordinal(self, ordinal: Callable[[], int | None]) -> None:
        """How to ask torch_xla for this process's ordinal (once it is imported)."""
        self._ordinal = ordinal

    def now_ms(self) -> float:
        """Milliseconds since this process's file started (the ``t`` of records)."""
        return round((time.monotonic() - self._t0) * 1e3, 3)

    def write(self, record: Any) -> None:
        """Appends one record (a model of ``trace.schema``, as one JSON line); opens the file at
        the first."""
        line = (_json.dumps(to_json(record), separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None or os.getpid() != self._pid:
                self._open()  # sets self._fd, or raises
            fd = cast(int, self._fd)
            view = memoryview(line)
            while view:
                n = os.write(fd, view)
                view = view[n:]

    @property
    def opened(self) -> bool:
        return self._fd is not None and os.getpid() == self._pid

    def _open(self) -> None:
        forked_from = self._pid if os.getpid() != self._pid else None
        if forked_from is not None:  # a forked child: its own file and clock
            self._pid, self._t0, self._fd, self.path = os.getpid(), time.monotonic(), None, None
        os.makedirs(self.directory, exist_ok=True)
        ident = identity(self._environ, self._ordinal)
        names = ([f"rank-{ident['rank']}.jsonl", f"rank-{ident['rank']}.{self._pid}.jsonl"]
                 if ident["rank"] is not None else [f"proc-{self._pid}.jsonl"])
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        for i, name in enumerate(names):
            path = os.path.join(self.directory, name)
            try:
                self._fd = os.open(path, flags, 0o644)
            except FileExistsError:
                if i == len(names) - 1:
                    raise
                continue
            self.path = path
            break
        self.identity = ident
        head = Header(schema_version=SCHEMA_VERSION, schema_minor=SCHEMA_MINOR, pid=ident["pid"], host=ident["host"],
                      wall=time.time(), rank=ident["rank"], world_size=ident.get("world_size"),
                      local_rank=ident.get("local_rank"), source=ident["source"], argv=list(sys.argv),
                      executable=sys.executable, python=sys.version.split()[0], cwd=os.getcwd(),
                      forked_from=forked_from)
        os.write(self._fd, (_json.dumps(to_json(head), separators=(",", ":")) + "\n").encode())
