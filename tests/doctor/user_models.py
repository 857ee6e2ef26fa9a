"""--model factories for the doctor tests (imported by module:factory, also in worker processes)."""

import torch


def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return model, (torch.randn(3, 8),)


def not_a_pair():
    return torch.nn.Linear(2, 2)
