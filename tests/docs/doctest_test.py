"""Every docstring example (``>>>``) in the torch_xla_ext package runs and prints what it shows.

One test per module that has examples, found from the sources (a new module is picked up without
editing this file). Each module's examples run with :mod:`doctest` in this process (PJRT_DEVICE=CPU,
an empty temporary working directory, so files an example writes land there); Bazel runs groups of
modules as separate targets (tests/docs/BUILD). No option flags are on by default: an example
whose figures vary by machine says so with ``# doctest: +ELLIPSIS`` or ``+NORMALIZE_WHITESPACE``.
``# doctest: +SKIP`` is only for what a test cannot have, and the line says why, as a comment
before the directive: ``>>> run_on_tpu()  # needs a TPU  # doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re

import pytest

import torch_xla_ext

os.environ.setdefault("PJRT_DEVICE", "CPU")

PACKAGE = os.path.dirname(os.path.abspath(torch_xla_ext.__file__))
# A prompt line that is an example: doctest drops `>>>` lines holding only a comment.
_PROMPT = re.compile(r"^[ \t]*>>>(?![ \t]*(#|$))", re.MULTILINE)
# The reason is a comment before the directive on the same line.
_SKIP_REASON = re.compile(r"#\s*(?!doctest:)\S.*#\s*doctest:[^\n]*\+SKIP")


def _modules_with_examples() -> list[tuple[str, int]]:
    """(module name, number of example ``>>>`` lines in its source) for every package module with one."""
    out = []
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "csrc"))
        for f in sorted(files):
            if not f.endswith(".py") or f == "__main__.py":
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8") as fh:
                n = len(_PROMPT.findall(fh.read()))
            if n:
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[: -len(".py")]
                name = rel.replace(os.sep, ".").removesuffix(".__init__")
                out.append((name, n))
    return out


MODULES = _modules_with_examples()


def _doctests(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    return sorted((t for t in tests if t.examples), key=lambda t: t.lineno or 0)


def _unexplained_skips(tests: list[doctest.DocTest]) -> list[str]:
    return [f"{t.name} line {(t.lineno or 0) + ex.lineno + 1}: {ex.source.strip()}"
            for t in tests for ex in t.examples
            if ex.options.get(doctest.SKIP) and not _SKIP_REASON.search(ex.source)]


def _run(tests: list[doctest.DocTest]) -> tuple[int, int, str]:
    """(failed, tried, doctest's report of the failures)."""
    out: list[str] = []
    runner = doctest.DocTestRunner(verbose=False)
    for t in tests:
        # clear_globs=False: Dynamo keeps entries in a compiled function's globals and removes them later.
        runner.run(t, out=out.append, clear_globs=False)
    return runner.failures, runner.tries, "".join(out)


def test_the_package_has_examples():
    # The finder below must see a fair share of the package; an empty list means a broken walk.
    assert len(MODULES) >= 10, MODULES


def test_the_checks_catch_a_wrong_output_and_an_unexplained_skip():
    parse = doctest.DocTestParser().get_doctest
    wrong = parse(">>> 1 + 1\n3\n", {}, "wrong", "wrong.py", 0)
    assert _run([wrong])[:2] == (1, 1)
    right = parse(">>> 1 + 1\n2\n>>> print('a  b')  # doctest: +NORMALIZE_WHITESPACE\na b\n", {}, "right", "right.py", 0)
    assert _run([right])[:2] == (0, 2)
    skips = parse(">>> tpu()  # doctest: +SKIP\n>>> tpu()  # needs a TPU  # doctest: +SKIP\n", {}, "skips", "skips.py", 0)
    assert _unexplained_skips([skips]) == ["skips line 1: tpu()  # doctest: +SKIP"]


@pytest.mark.parametrize("name,prompts", MODULES, ids=[m for m, _ in MODULES])
def test_examples(name, prompts, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Examples that start worker processes (graph_breaks.compare) need the package under test there.
    pkg_parent = os.path.dirname(PACKAGE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (pkg_parent, os.environ.get("PYTHONPATH")) if p))
    tests = _doctests(name)
    found = sum(len(t.examples) for t in tests)
    # A `>>>` the finder does not reach (a string that is no docstring, a nested function's
    # docstring) would never run: every prompt in the source must be a collected example.
    assert found == prompts, (f"{name}: {prompts} `>>>` lines in the source but doctest collects "
                              f"{found} examples; put examples in module, class or function docstrings")
    unexplained = _unexplained_skips(tests)
    assert not unexplained, ("+SKIP without a reason (write it as a comment before the directive):\n"
                             + "\n".join(unexplained))
    failed, tried, report = _run(tests)
    if failed:
        pytest.fail(f"{failed} of {tried} examples of {name} failed:\n{report}", pytrace=False)
