"""Export on every zoo model: export -> save -> load -> run against torch_xla's execution of the
same export, manifest roles against torch.export's graph signature, output names against
torch.utils._pytree, int64 kept, and the round trips of to_jax and inline_constants (checks in
zoo_checks.py). A model whose shapes depend on its inputs' values (the MoE) has no one program: its
export must be refused with the typed error naming the guard, checked against torch.export's own
report and torch_xla's metrics (lazy_fallback_checks.py). Bazel runs it in groups of models (`-k`),
one export per model per process."""


import pytest

from tests.export import lazy_fallback_checks as refused
from tests.export import zoo_checks as checks

from tests import zoo  # noqa: E402

EXPORTABLE = tuple(n for n in zoo.NAMES if zoo.MODELS[n].data_dependent is None)
DATA_DEPENDENT = tuple(n for n in zoo.NAMES if zoo.MODELS[n].data_dependent is not None)


@pytest.mark.parametrize("name", DATA_DEPENDENT)
def test_data_dependent_model_is_refused_naming_the_guard(name):
    model, args, kwargs = zoo.build(name)
    refused.check_refused(model, args, kwargs, zoo.MODELS[name].data_dependent)


@pytest.fixture(scope="module", params=EXPORTABLE)
def case(request, tmp_path_factory):
    return checks.build_case(request.param, str(tmp_path_factory.mktemp("zoo")))


def test_run_matches_torch_xla(case):
    checks.check_run(case)


def test_manifest_roles_match_graph_signature(case):
    checks.check_roles_against_graph_signature(case)


def test_outputs_named_like_pytree(case):
    checks.check_outputs_named_like_pytree(case)


def test_int64_kept(case):
    checks.check_int64_kept(case)


def test_to_jax_round_trip(case, tmp_path):
    checks.check_to_jax_round_trip(case, str(tmp_path))


def test_inline_round_trip(case, tmp_path):
    checks.check_inline_round_trip(case, str(tmp_path))
