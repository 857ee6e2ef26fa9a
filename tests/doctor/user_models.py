"""--model factories for the doctor tests (imported by module:factory, also in worker processes)."""

import torch


def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return model, (torch.randn(3, 8),)


def not_a_pair():
    return torch.nn.Linear(2, 2)



def small_convnext():
    """torchvision's ConvNeXt architecture in a small config: like convnext_tiny, its forward pass
    fails under torch.compile(backend="openxla") in torch_xla 2.9 and runs in lazy mode."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]).eval()
    return model, (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)


def convnext_tiny():
    """torchvision's convnext_tiny (random init) at the smallest input its 32x downsampling takes
    (the model of the issue; too slow for the test suite, for runs by hand)."""
    import torchvision

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return torchvision.models.convnext_tiny(weights=None).eval(), (torch.randn(1, 3, 32, 32, generator=g),)
