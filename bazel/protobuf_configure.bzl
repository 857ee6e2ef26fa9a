"""Repository rule: Debian's protobuf (protoc, headers, libprotobuf.so) as `@com_google_protobuf`.

Bazel 4.2.3 offline has no rules_proto to download, so the project generates C++ from .proto files
with the machine's protoc (`txe_cc_proto_library` in bazel/txe.bzl) and links the same release's
runtime. `$TXE_PROTOC` overrides the protoc found on PATH; the library and headers are asked of
the compiler, so nothing names one machine's paths. Debian: `apt-get install protobuf-compiler
libprotobuf-dev` (`make setup` does).
"""

def _fail(msg):
    fail("\n[protobuf_configure] " + msg + "\nInstall Debian's protobuf-compiler and libprotobuf-dev " +
         "(`make setup`), or set TXE_PROTOC.\n")

def _protobuf_configure_impl(ctx):
    protoc = ctx.os.environ.get("TXE_PROTOC", "") or ctx.which("protoc")
    if not protoc:
        _fail("no protoc on PATH")
    version = ctx.execute([str(protoc), "--version"])
    if version.return_code != 0:
        _fail("%s --version failed: %s" % (protoc, version.stderr))
    cc = ctx.which("gcc") or ctx.which("cc")
    lib = ctx.execute([str(cc), "-print-file-name=libprotobuf.so"]).stdout.strip()
    if not lib or lib == "libprotobuf.so" or not ctx.path(lib).exists:
        _fail("the compiler finds no libprotobuf.so")
    real = ctx.execute(["readlink", "-f", lib]).stdout.strip()
    soname = ""
    for line in ctx.execute(["objdump", "-p", real]).stdout.splitlines():
        if "SONAME" in line:
            soname = line.strip().split(" ")[-1]
    if not soname:
        _fail("no SONAME in " + real)
    if not ctx.path("/usr/include/google/protobuf/message.h").exists:
        _fail("no protobuf headers in /usr/include")
    ctx.symlink("/usr/include/google/protobuf", "include/google/protobuf")
    ctx.symlink(real, soname)
    ctx.symlink(protoc, "protoc")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(["protoc", "{soname}"])

# The runtime, linked dynamically; the wheel ships {soname} next to _ext.so (RUNPATH $ORIGIN).
cc_import(
    name = "libprotobuf_so",
    shared_library = "{soname}",
)

cc_library(
    name = "protobuf",
    hdrs = glob(["include/google/protobuf/**/*.h", "include/google/protobuf/**/*.inc"]),
    includes = ["include"],
    deps = [":libprotobuf_so"],
)

# The .proto files protoc ships (any, duration, timestamp, ...), for imports.
filegroup(
    name = "well_known_protos",
    srcs = glob(["include/google/protobuf/*.proto"]),
)
""".format(soname = soname))
    ctx.file("defs.bzl", "PROTOC_VERSION = %r\nSONAME = %r\n" % (version.stdout.strip(), soname))

protobuf_configure = repository_rule(
    implementation = _protobuf_configure_impl,
    environ = ["TXE_PROTOC"],
    local = True,
)
