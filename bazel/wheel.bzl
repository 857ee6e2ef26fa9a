"""txe_wheel: the package's Python files and extension module as a wheel in a directory."""

def _txe_wheel_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    args = ctx.actions.args()
    args.add("--out", out.path)
    args.add("--requirements", ctx.file.requirements)
    args.add_all(ctx.files.srcs, format_each = "--file=%s")
    for f in ctx.files.srcs:
        args.add("--dest=" + f.short_path)
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = ctx.files.srcs + [ctx.file.requirements],
        outputs = [out],
        mnemonic = "TxeWheel",
        progress_message = "Building the torch_xla_ext wheel",
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

txe_wheel = rule(
    implementation = _txe_wheel_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True, doc = "Files placed in the wheel at their workspace paths."),
        "requirements": attr.label(allow_single_file = True, doc = "Pins; the stack's become Requires-Dist."),
        "_builder": attr.label(default = "//python:build_wheel", executable = True, cfg = "host"),
    },
)
