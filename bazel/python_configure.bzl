"""Repository rule: the project venv's Python as the test toolchain, plus its headers and pybind11.

The interpreter is `$TXE_PYTHON` when set, else `<workspace>/.venv/bin/python` (the link that
python/setup_env.sh makes). Nothing here names a path of one machine: every path is asked of
that interpreter, so a fork or a CI machine with its venv elsewhere works unchanged.
"""

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

cc_library(
    name = "python_headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/pybind11/**/*.h"]),
    includes = ["pybind11_include"],
    deps = [":python_headers"],
)
""".format(python = python))

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["TXE_PYTHON"],
    local = True,
)
