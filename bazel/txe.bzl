"""Project macros, so per-folder BUILD files stay short (in the manner of torch_xla's ptxla_*)."""

load("//bazel:python_configure.bzl", "wheel_tag")

TXE_COPTS = ["-Wextra", "-Wno-unused-parameter"]

# The second tier: breadth that costs minutes (zoo and stability sweeps, other stacks' and
# CPythons' venvs, fresh-venv installs, outside tools on real models). `make test` (README's
# command) leaves these targets out (--test_tag_filters=-tier2); `make test-all` and CI
# (.ci/run, after README's command) run them. A test tagged so needs a faster sibling that keeps
# its component's capability in the first tier.
TIER2 = "tier2"

# Second-tier breadth that CI leaves out, so CI stays within its 40 minutes on a 2-core machine:
# more models (or configurations) of a capability that a CI target already checks on others.
# `make test-all` runs these too; `.ci/run` runs the second tier with --test_tag_filters=-breadth
# (python/run_tests.sh --ci). Tag a target so in addition to TIER2.
BREADTH = "breadth"

def txe_cc_library(name, srcs = [], hdrs = [], deps = [], copts = [], **kwargs):
    """A C++17 library of the core: no Python, linkable alone by a torch_xla fork."""
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps,
        copts = TXE_COPTS + copts,
        visibility = kwargs.pop("visibility", ["//visibility:public"]),
        **kwargs
    )

def txe_cc_test(name, srcs, deps = [], size = "small", copts = [], **kwargs):
    """A googletest next to the code it tests."""
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + ["@com_google_googletest//:gtest_main"],
        copts = TXE_COPTS + copts,
        size = size,
        **kwargs
    )

def txe_pybind_extension(name, srcs, hdrs = [], deps = [], wheel_pythons = [], **kwargs):
    """A pybind11 extension module `<name>.so` (linked shared, Python symbols resolved at import)
    built against the project venv's CPython, and `<name>_cp310.so` ... for each CPython of
    `wheel_pythons` ("3.10", ...: built against `@python_cp310`'s headers, manual: for its wheel)."""
    variants = [("", "@local_python", [])]
    variants += [("_" + wheel_tag(v), "@python_" + wheel_tag(v), ["manual"]) for v in wheel_pythons]
    for suffix, python, tags in variants:
        native.cc_binary(
            name = name + suffix + ".so",
            srcs = srcs + hdrs,
            deps = deps + [python + "//:pybind11"],
            copts = ["-fvisibility=hidden", "-fexceptions"],
            linkshared = True,
            linkstatic = True,
            tags = kwargs.get("tags", []) + tags,
            **{k: v for k, v in kwargs.items() if k != "tags"}
        )

def txe_py_packages(layers, data = {}):
    """One py_library per row of the layer table (//bazel:layers.bzl), named after the row, with
    the row's sources and deps, plus `package` (torch_xla_ext/__init__.py) under every one, and
    the aggregate library named after the package for what needs all of it (the CLI's users, the
    docs, the wheel). `data` adds files to a row's library (the extension next to `_ext`)."""
    names = []
    for name, srcs, deps in layers:
        native.py_library(
            name = name,
            srcs = native.glob(srcs) if srcs else [],
            data = data.get(name, []),
            deps = [":" + d for d in deps] + ([":package"] if name != "package" else []),
            imports = [".."],
            srcs_version = "PY3",
            visibility = ["//visibility:public"],
        )
        names.append(name)
    native.py_library(
        name = native.package_name().split("/")[-1],
        deps = [":" + n for n in names],
        visibility = ["//visibility:public"],
    )

def txe_py_library(name, srcs = None, deps = [], **kwargs):
    """A test helper module (`<name>.py` unless `srcs` says otherwise) that tests import as
    `from tests.<component> import <name>`; `deps` names what it imports."""
    native.py_library(
        name = name,
        srcs = srcs if srcs != None else [name + ".py"],
        deps = deps,
        srcs_version = "PY3",
        **kwargs
    )

def txe_py_import_tests(layers):
    """`<library>_import_test` for every row of the layer table: imports each module of the library
    with only its row's deps in the runfiles (tests/layers/import_check.py), so a module-level
    import the row does not declare fails in `bazel test //...`."""
    for name, _, _ in layers:
        native.py_test(
            name = name + "_import_test",
            srcs = ["import_check.py"],
            main = "import_check.py",
            args = [name],
            data = ["//bazel:layers.bzl"],
            deps = [
                ":layer_table",
                "//torch_xla_ext:" + name,
            ],
            size = "small",
            tags = ["python"],
            python_version = "PY3",
            srcs_version = "PY3",
        )

def _quoted_k(k):
    # Bazel splits `args` like a Bourne shell, so a -k expression with spaces must reach it as
    # one quoted word ('a or b'); done here once rather than by hand in every BUILD file.
    if "'" in k:
        fail("txe_py_test: k = %r must not contain a single quote" % k)
    return ["-k", "'%s'" % k]

def txe_py_test(name, src, size = "small", deps = None, data = [], args = [], tags = [], k = None, **kwargs):
    """A pytest file run by Bazel with the venv interpreter; results land in Bazel's test.xml.

    `deps` names the //torch_xla_ext libraries (and test helper libraries) the file imports: only
    those are in its runfiles, so the test re-runs only when they change; without `deps` it gets
    all of //torch_xla_ext (the safe side for a target written before the split). `k` is a pytest
    -k expression ("resnet18 or vit"), passed as one argument. Tagged "python" so `--config=asan`
    (which cannot load an instrumented extension into the uninstrumented interpreter) leaves it
    out."""
    if deps == None:
        deps = ["//torch_xla_ext"]
    native.py_test(
        name = name,
        srcs = [src, "//bazel:pytest_main.py"],
        main = "//bazel:pytest_main.py",
        args = ["$(location %s)" % src] + (_quoted_k(k) if k != None else []) + args,
        deps = deps,
        data = data + ["//bazel:pytest.ini"],
        size = size,
        tags = tags + ["python"],
        python_version = "PY3",
        srcs_version = "PY3",
        **kwargs
    )

def txe_venv_test(name, src, venv, extras = "", wheel = "//python:wheel", size = "medium", data = [], tags = [], **kwargs):
    """A pytest file run inside the cached venv of another stack (`venv`: a pin file's name in
    python/tool_requirements, e.g. "torch_2_14_1"), with the wheel (`wheel`: the one of that
    venv's CPython) installed there with `extras`, offline, `pip check` clean; the file's
    `prepare(out_dir)`, if any, runs first on the pinned stack (tests/stacks/run_in_venv.py).
    Manual and exclusive (the venv comes from the registry on a cold machine), second tier, tagged
    "stack_venv": .ci/run runs every target with that tag, so a new one needs no CI edit."""
    native.py_test(
        name = name,
        srcs = ["//tests/stacks:run_in_venv.py"],
        main = "//tests/stacks:run_in_venv.py",
        args = ["--venv", venv] + (["--extras", extras] if extras else []) + ["$(location %s)" % src],
        data = data + [src, wheel],
        deps = ["//python:tool_venv", "//tests/packaging:wheels", "//torch_xla_ext"],  # prepare() runs on the pinned stack
        size = size,
        tags = tags + ["python", "manual", "exclusive", "stack_venv", TIER2],
        python_version = "PY3",
        srcs_version = "PY3",
        **kwargs
    )

def txe_py_test_groups(src, groups, sizes = {}, tier2 = [], breadth = [], group_deps = {}, **kwargs):
    """One txe_py_test per entry of `groups` ({target name: pytest -k expression}) over the same
    file, so Bazel runs the groups side by side; `sizes` overrides `size` per target, the targets
    named in `tier2` get the TIER2 tag (a file's fast core in `make test`, its sweep in the second
    tier), and those in `breadth` (second tier as well) the BREADTH tag (not in CI). `group_deps`
    adds deps to one target (what only its tests import, inside the test), so the others do not
    re-run when that changes."""
    for name, k in groups.items():
        args = dict(kwargs)
        if name in sizes:
            args["size"] = sizes[name]
        if name in group_deps:
            args["deps"] = args.get("deps", []) + group_deps[name]
        if name in tier2 or name in breadth:
            args["tags"] = args.get("tags", []) + [TIER2]
        if name in breadth:
            args["tags"] = args["tags"] + [BREADTH]
        txe_py_test(name = name, src = src, k = k, **args)

def txe_cc_proto_library(name, srcs, deps = [], **kwargs):
    """C++ for `srcs` (.proto files named by their import paths relative to this package, e.g.
    "xla/service/hlo.proto") made by the machine's protoc (@com_google_protobuf), as a cc_library
    whose headers are included by the same paths ("xla/service/hlo.pb.h"). Bazel 4.2.3 offline
    has no rules_proto to do this."""
    outs = []
    for s in srcs:
        outs += [s[:-len(".proto")] + ".pb.h", s[:-len(".proto")] + ".pb.cc"]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + ["@com_google_protobuf//:well_known_protos"],
        outs = outs,
        tools = ["@com_google_protobuf//:protoc"],
        # The import root is where srcs[0] sits minus its import path (the package, in any repo).
        cmd = ("src=$(location %s); root=$${src%%/%s}; " % (srcs[0], srcs[0]) +
               "$(location @com_google_protobuf//:protoc) -I$$root -Iexternal/com_google_protobuf/include " +
               "--cpp_out=$(@D) " + " ".join(["$(location %s)" % s for s in srcs])),
    )
    native.cc_library(
        name = name + "_headers",
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = ["@com_google_protobuf//:protobuf"],
        visibility = kwargs.get("visibility", ["//visibility:public"]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        copts = ["-w"],  # generated code: its warnings are protoc's, not ours
        deps = deps + [":" + name + "_headers"],
        alwayslink = True,
        visibility = kwargs.pop("visibility", ["//visibility:public"]),
        **kwargs
    )
