"""Repository rules: the project venv's Python as the test toolchain, plus its headers and pybind11;
and the headers of each CPython the wheels are built for (`make wheels`).

The interpreter is `$TXE_PYTHON` when set, else `<workspace>/.venv/bin/python` (the link that
python/setup_env.sh makes). Nothing here names a path of one machine: every path is asked of
that interpreter, so a fork or a CI machine with its venv elsewhere works unchanged.

`python_wheel_headers(WHEEL_PYTHONS)` makes `@python_cp310` ... `@python_cp313`: that CPython's
headers, with the project's pybind11 (headers only, the same for every CPython). Each finds its
interpreter as `$TXE_PYTHON_3_10` (for 3.10), else the newest `$PYENV_ROOT/versions/3.10.*`
(default root ~/.pyenv), else `python3.10` on PATH, and is fetched only when a wheel target for
that CPython is built (the wheel targets are manual, so `bazel test //...` needs none of them).
"""

# The CPythons a wheel is built for (`make wheels`, //python:wheels): those torch_xla 2.9.0 ships
# wheels for. tests/packaging/versions_test.py checks the list against README.md.
WHEEL_PYTHONS = ["3.10", "3.11", "3.12", "3.13"]

def wheel_tag(version):
    """'3.12' -> 'cp312'."""
    return "cp" + version.replace(".", "")

_QUERY = """
import json, sys, sysconfig
import pybind11
print(json.dumps({
    "include": sysconfig.get_paths()["include"],
    "pybind11_include": pybind11.get_include(),
    "executable": sys.executable,
    "version": "%d.%d" % sys.version_info[:2],
}))
"""

# A CPython's headers (the repository's include/) and pybind11 with them.
_HEADERS_BUILD = """
cc_library(
    name = "python_headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)

cc_library(
    name = "pybind11",
    deps = [
        ":python_headers",
        "{pybind11_headers}",
    ],
)
"""

def _fail(msg):
    fail("\n[python_configure] " + msg + "\nRun `make setup` (python/setup_env.sh) first, or set TXE_PYTHON to a python with the pinned stack.\n")

def _python_configure_impl(ctx):
    # Re-run when the pins change, so a new venv is picked up.
    ctx.path(Label("//python:requirements.txt"))
    workspace = ctx.path(Label("//:WORKSPACE")).dirname
    python = ctx.os.environ.get("TXE_PYTHON", "")
    if not python:
        python = str(workspace) + "/.venv/bin/python"
    if not ctx.path(python).exists:
        _fail("no interpreter at %s" % python)
    res = ctx.execute([python, "-c", _QUERY])
    if res.return_code != 0:
        _fail("%s could not report its paths:\n%s" % (python, res.stderr))
    info = json.decode(res.stdout.strip())
    ctx.symlink(info["include"], "include")
    ctx.symlink(info["pybind11_include"], "pybind11_include")
    ctx.file("defs.bzl", "PYTHON_INTERPRETER = %r\nPYTHON_VERSION = %r\n" % (python, info["version"]))
    ctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
    # Tools run in actions with a bare PATH: the stub must not rely on `env python`.
    stub_shebang = "#!{python}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "py_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

# pybind11 alone (it is headers only and the same for every CPython): the wheels of other
# CPythons pair it with their own python_headers.
cc_library(
    name = "pybind11_headers",
    hdrs = glob(["pybind11_include/pybind11/**/*.h"]),
    includes = ["pybind11_include"],
)
""".format(python = python) + _HEADERS_BUILD.format(pybind11_headers = ":pybind11_headers"))

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["TXE_PYTHON"],
    local = True,
)

_HEADERS_QUERY = """
import json, sys, sysconfig
print(json.dumps({"include": sysconfig.get_paths()["include"], "version": "%d.%d" % sys.version_info[:2],
                  "implementation": sys.implementation.name}))
"""

def _ask(ctx, python):
    if not python or not ctx.path(python).exists:
        return None
    res = ctx.execute([python, "-c", _HEADERS_QUERY])
    if res.return_code != 0:
        return None
    return json.decode(res.stdout.strip())

def _find_interpreter(ctx, version):
    env = "TXE_PYTHON_" + version.replace(".", "_")
    tried = []
    candidates = []
    if ctx.os.environ.get(env):
        candidates.append(ctx.os.environ[env])
    else:
        root = ctx.os.environ.get("PYENV_ROOT", ctx.os.environ.get("HOME", "") + "/.pyenv")
        versions = ctx.path(root + "/versions")
        if versions.exists:
            found = sorted([d.basename for d in versions.readdir() if d.basename.startswith(version + ".")])
            for name in reversed(found):
                candidates.append("%s/versions/%s/bin/python%s" % (root, name, version))
        on_path = ctx.which("python" + version)
        if on_path:
            candidates.append(str(on_path))
    for python in candidates:
        info = _ask(ctx, python)
        tried.append(python)
        if info and info["version"] == version and info["implementation"] == "cpython":
            return python, info
    fail("\n[python_configure] no CPython %s for its wheel (tried: %s). Set %s to a CPython %s interpreter " % (
        version,
        ", ".join(tried) or "nothing",
        env,
        version,
    ) + "(only its headers are used), or leave this wheel out.\n")

def _python_headers_impl(ctx):
    python, info = _find_interpreter(ctx, ctx.attr.version)
    ctx.symlink(info["include"], "include")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# CPython {version}'s headers ({python}).
""".format(version = ctx.attr.version, python = python) + _HEADERS_BUILD.format(
        pybind11_headers = "@local_python//:pybind11_headers",
    ))

python_headers_configure = repository_rule(
    implementation = _python_headers_impl,
    attrs = {"version": attr.string(mandatory = True)},
    environ = ["TXE_PYTHON_" + v.replace(".", "_") for v in WHEEL_PYTHONS] + ["PYENV_ROOT"],
    local = True,
)

def python_wheel_headers(versions = WHEEL_PYTHONS):
    """`@python_cp310` ... for each version: that CPython's headers and pybind11, for its wheel."""
    for version in versions:
        python_headers_configure(name = "python_" + wheel_tag(version), version = version)
