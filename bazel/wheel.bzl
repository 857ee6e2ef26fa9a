"""txe_wheel: the package's Python files and extension module as a wheel in a directory."""

def _txe_wheel_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    args = ctx.actions.args()
    args.add("--out", out.path)
    args.add("--requirements", ctx.file.requirements)
    inputs = ctx.files.srcs + [ctx.file.requirements]
    args.add_all(ctx.files.srcs, format_each = "--file=%s")
    for f in ctx.files.srcs:
        args.add("--dest=" + f.short_path)
    if ctx.file.ext:
        # Another CPython's build of the extension (_ext_cp312.so), placed as the package's _ext.so.
        args.add("--file=" + ctx.file.ext.path)
        args.add("--dest=torch_xla_ext/_ext.so")
        inputs.append(ctx.file.ext)
    if ctx.attr.python_tag:
        args.add("--python-tag", ctx.attr.python_tag)
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = inputs,
        outputs = [out],
        mnemonic = "TxeWheel",
        progress_message = "Building the torch_xla_ext wheel %s" % (ctx.attr.python_tag or ""),
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

txe_wheel = rule(
    implementation = _txe_wheel_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True, doc = "Files placed in the wheel at their workspace paths."),
        "ext": attr.label(allow_single_file = True, doc = "An extension module placed as torch_xla_ext/_ext.so."),
        "python_tag": attr.string(doc = "cp310 ...: the CPython `ext` was built for (default: the builder's)."),
        "requirements": attr.label(allow_single_file = True, doc = "Pins; the stack's become the xla extra."),
        "_builder": attr.label(default = "//python:build_wheel", executable = True, cfg = "host"),
    },
)
