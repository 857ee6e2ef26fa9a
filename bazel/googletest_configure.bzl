"""Repository rule: googletest built from source that is already on the machine.

Looks in `$TXE_GTEST_SRC`, then asks dpkg where Debian's `googletest` package (pulled in by
libgtest-dev) put its sources. Building from source keeps gtest on our compiler flags, which the
sanitizer config needs.
"""

def _find_root(ctx):
    env = ctx.os.environ.get("TXE_GTEST_SRC", "")
    if env:
        return env
    res = ctx.execute(["dpkg", "-L", "googletest"])
    if res.return_code == 0:
        for line in res.stdout.splitlines():
            if line.endswith("/googletest/src/gtest-all.cc"):
                return line[:-len("/googletest/src/gtest-all.cc")]
    fail("\n[googletest_configure] googletest sources not found. Install Debian's libgtest-dev " +
         "(`make setup` does) or set TXE_GTEST_SRC to a googletest checkout.\n")

def _googletest_configure_impl(ctx):
    root = _find_root(ctx)
    for sub in ["googletest", "googlemock"]:
        ctx.symlink(root + "/" + sub, sub)
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "gtest",
    srcs = [
        "googletest/src/gtest-all.cc",
        "googlemock/src/gmock-all.cc",
    ],
    hdrs = glob([
        "googletest/include/**/*.h",
        "googletest/src/*.h",
        "googletest/src/*.cc",
        "googlemock/include/**/*.h",
        "googlemock/src/*.cc",
    ]),
    includes = [
        "googlemock",
        "googlemock/include",
        "googletest",
        "googletest/include",
    ],
    linkopts = ["-pthread"],
)

cc_library(
    name = "gtest_main",
    srcs = ["googlemock/src/gmock_main.cc"],
    deps = [":gtest"],
)
""")

googletest_configure = repository_rule(
    implementation = _googletest_configure_impl,
    environ = ["TXE_GTEST_SRC"],
    local = True,
)
