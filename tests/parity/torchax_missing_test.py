"""frontend="torchax" where torchax does not import: the gate refuses before anything runs, with
an UnsupportedStackError naming the feature and the install line of the torchax extra. Its own
process: the gate decides a feature once per process."""

import pytest
import torch

from tests.jax_call.without_torchax import without_torchax
from torch_xla_ext import parity
from torch_xla_ext._versions import UnsupportedStackError

INSTALL = "pip install 'torch-xla-ext[torchax]'"


@pytest.mark.parametrize("call", ["verify", "capture"])
def test_torchax_missing_names_the_install_line(call):
    model, args = torch.nn.Linear(2, 2), (torch.ones(1, 2),)
    with without_torchax():
        with pytest.raises(UnsupportedStackError) as e:
            getattr(parity, call)(model, args, frontend="torchax")
    assert "frontend='torchax'" in str(e.value) and INSTALL in str(e.value)
