"""Whole training steps compiled with torch.compile(backend="openxla"): zero_grad, forward, loss,
backward and the SGD step inside the compiled function, on models built from configs: Qwen2 and
DistilBERT (transformers, one layer) and EfficientNet-B0's first three stages (torchvision's
EfficientNet and MBConv blocks: the stem, MBConv1 3x3, MBConv6 3x3 x2, MBConv6 5x5, the head).
A case with ``:jump`` adds a data-dependent branch and a ``.item()`` inside the step.

    python dynamo_train.py --cases qwen2,qwen2:jump,distilbert:jump,efficientnet_b0 --steps 1

The cases run one after another in this process, each with its own ``torch.compile`` of the same
step function (so every case after the first is a recompile of each frame)."""

import argparse

import torch
import torch_xla


def _model(name):
    torch.manual_seed(0)
    if name == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        cfg = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, use_cache=False)
        return Qwen2ForCausalLM(cfg), torch.randint(0, 128, (2, 8)), lambda out: out.logits.float().pow(2).mean()
    if name == "distilbert":
        from transformers import DistilBertConfig, DistilBertForSequenceClassification

        cfg = DistilBertConfig(vocab_size=128, dim=32, hidden_dim=64, n_layers=1, n_heads=4)
        return (DistilBertForSequenceClassification(cfg), torch.randint(0, 128, (2, 8)),
                lambda out: out.logits.float().pow(2).mean())
    if name == "efficientnet_b0":
        from torchvision.models.efficientnet import EfficientNet, MBConvConfig

        # EfficientNet-B0's first stages (expand ratio, kernel, stride, in, out, layers), as torchvision builds B0.
        stages = [MBConvConfig(1, 3, 1, 32, 16, 1), MBConvConfig(6, 3, 2, 16, 24, 2), MBConvConfig(6, 5, 2, 24, 40, 1)]
        return (EfficientNet(stages, dropout=0.2, num_classes=10), torch.randn(2, 3, 32, 32),
                lambda out: out.pow(2).mean())
    raise SystemExit(f"unknown model {name}")


def build(name, jump):
    device = torch_xla.device()
    model, x, loss_of = _model(name)
    model = model.to(device)
    model.train()
    x = x.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch_xla.sync()

    def train_step(x):
        optimizer.zero_grad()
        loss = loss_of(model(x))
        if jump:
            if loss > 0:  # a data-dependent branch
                loss = loss * 2
            scale = loss.item()  # a host read inside the compiled step
            loss = loss / max(scale, 1.0)
        loss.backward()
        optimizer.step()
        return loss.detach() * 1.0

    return train_step, x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="qwen2")
    p.add_argument("--steps", type=int, default=1)
    args = p.parse_args()
    for case in args.cases.split(","):
        name, _, jump = case.partition(":")
        train_step, x = build(name, jump == "jump")
        step = torch.compile(train_step, backend="openxla")
        for _ in range(args.steps):
            step(x)
            torch_xla.sync()
        print("done", case, flush=True)


if __name__ == "__main__":
    main()
