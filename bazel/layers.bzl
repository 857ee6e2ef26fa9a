"""The layers of the Python package: one py_library per package or shared module, lowest first.

This table is the one copy of the rule. //torch_xla_ext:BUILD makes a `py_library` of each row
(`txe_py_packages`), so a py_test's runfiles hold only the libraries it names and what they
depend on: a module that imports a library its row does not list fails under Bazel. The layers
test (//tests/layers) reads this file too (it is a Python literal as well as Starlark) and checks
every import in torch_xla_ext/ against it, statically, including imports inside functions.

A row: (library, sources as globs relative to torch_xla_ext/, libraries it may import). A
library may import only libraries on earlier rows (a lower layer), and only those it names.
Every library also gets "package" (torch_xla_ext/__init__.py). A new file inside a package lands
in that package's library through its glob; a new small shared module (`torch_xla_ext/_x.py`)
is one new row above its first user, plus its name in its users' rows.
"""

TXE_PY_LAYERS = [
    # The package itself: `import torch_xla_ext` imports only its version.
    ("package", ["__init__.py", "version.py"], []),
    # Shared modules: no torch_xla_ext imports but errors. _dtypes (the one dtype table), _json
    # (the one JSON encoding), _validation (the one validator of untrusted files, pydantic), _cache
    # (the bounded cache of slow-to-make entries).
    ("errors", ["errors.py"], []),
    ("_dtypes", ["_dtypes.py"], []),
    ("_json", ["_json.py"], []),
    ("_validation", ["_validation.py"], []),
    ("_cache", ["_cache.py"], []),
    ("_html", ["_html.py"], []),
    ("_plot", ["_plot.py"], []),
    # Chrome trace events laid out so that complete events nest on each thread (both timelines).
    ("_chrome_trace", ["_chrome_trace.py"], []),
    ("_device", ["_device.py"], ["errors"]),
    ("_factory", ["_factory.py"], ["errors"]),
    # Dynamo's, AOTAutograd's and the openxla bridge's events as typed values: what graph_breaks'
    # watch hands its sinks and the script trace writes and reads back (one vocabulary for both).
    ("_dynamo_events", ["_dynamo_events.py"], []),
    # The one list of frontends ("torch_xla", "torchax") and the one check of a `frontend` argument.
    ("_frontend", ["_frontend.py"], ["errors"]),
    # The extension module and the shared libraries next to it (data of the py_library); its
    # module init imports errors (C++ Status -> our exception classes).
    ("_ext", [], ["errors"]),
    # The only code that touches torch_xla's and JAX's private APIs: not the extension.
    ("_compat", ["_compat/**/*.py"], ["_dtypes", "_json", "_validation", "errors"]),
    # The gate: probes what _compat relies on (_compat/capabilities.py) for each feature, and
    # that the extension loads in this CPython.
    ("_versions", ["_versions.py"], ["_compat", "_ext", "errors"]),
    # StableHLO text parsed (with the nesting guard) and HLO converted, for export and parity.
    ("_mlir_text", ["_mlir_text.py"], ["_compat", "errors"]),
    # StableHLO -> the value graph (cc/graph) through jaxlib's MLIR, for export and parity.
    ("_mlir_graph", ["_mlir_graph.py"], ["_compat", "_ext"]),
    # Components.
    ("numerics", ["numerics.py"], ["_dtypes", "_ext", "_json", "_versions", "errors"]),
    ("collectives", ["collectives.py"], ["_compat", "_dtypes", "_ext", "_versions", "errors"]),
    ("jax_call", ["jax_call.py"], ["_cache", "_compat", "_dtypes", "_ext", "_versions", "errors"]),
    ("export", ["export/**/*.py"], ["_cache", "_compat", "_dtypes", "_ext", "_frontend", "_json", "_mlir_graph", "_mlir_text", "_validation", "_versions", "errors"]),
    ("graph_breaks", ["graph_breaks/**/*.py"], ["_chrome_trace", "_compat", "_device", "_dynamo_events", "_ext", "_factory", "_html", "_json", "_plot", "_validation", "_versions", "errors"]),
    # The script trace: its recorder runs inside the user's processes (Dynamo's half through graph_breaks' watch).
    ("trace", ["trace/**/*.py"], ["_chrome_trace", "_compat", "_dtypes", "_dynamo_events", "_ext", "_html", "_json", "_validation", "_versions", "errors", "graph_breaks"]),
    ("parity", ["parity/**/*.py"], ["_compat", "_device", "_dtypes", "_ext", "_frontend", "_html", "_json", "_mlir_graph", "_mlir_text", "_plot", "_validation", "_versions", "errors", "numerics"]),
    # Composition and the command line.
    ("doctor", ["doctor/**/*.py"], ["_compat", "_device", "_factory", "_frontend", "_json", "_plot", "_versions", "collectives", "errors", "export", "graph_breaks", "jax_call", "numerics", "parity", "trace"]),
    ("cli", ["cli/**/*.py", "__main__.py"], ["_compat", "_device", "_factory", "_frontend", "_json", "_versions", "doctor", "errors", "export", "graph_breaks", "numerics", "parity", "trace"]),
]
