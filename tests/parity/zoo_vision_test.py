"""verify() in bf16 on the zoo's vision models (torchvision resnet18, mobilenet_v3, ViT): each has
a verdict, the rounded replay of XLA's own program (convolution, batch-norm-inference, pad,
reduce-window, select-and-scatter, gather, while) runs and is as close to fp64 as XLA (its
bit-equality with XLA is a reported figure), and every output's
cause follows from its fp64 figures (checked against an independent CPU fp64 run)."""



from tests.parity.zoo_checks import bf16_case_fixture, check_report

NAMES = ("resnet18", "mobilenet_v3", "vit")

case = bf16_case_fixture(NAMES)


def test_bf16_verdict_is_explained_by_fp64_figures(case):
    name, model, args, kwargs, report = case
    check_report(report, model, args, kwargs)


def _op_names(text):
    """Every op in a StableHLO module, walked with JAX's MLIR bindings."""
    from jax.extend.mlir import ir

    from torch_xla_ext._compat import jax_mlir

    names = set()

    def walk(op):
        names.add(op.name)
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    walk(inner.operation)

    with jax_mlir.make_context():
        walk(ir.Module.parse(text).operation)
    return names


def test_replay_covers_the_ops_the_old_interpreter_lacked(case):
    name, _, _, _, report = case
    ops = _op_names(report.hlo_text)
    assert "stablehlo.convolution" in ops  # every model here convolves (ViT patchifies with one)
    if name == "resnet18":
        assert {"stablehlo.batch_norm_inference", "stablehlo.pad", "stablehlo.reduce_window",
                "stablehlo.select_and_scatter"} <= ops, ops
