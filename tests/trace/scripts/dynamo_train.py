"""A training step compiled whole with torch.compile(backend="openxla"): zero_grad, forward, loss,
backward and the SGD step inside the compiled function, on a model built from a config (Qwen2,
DistilBERT, EfficientNet-B0). ``--jump`` adds a data-dependent branch and a ``.item()`` to it.

``build(model, jump)`` returns the step function and its input; the traced run calls it ``--steps``
times, and the oracle calls ``torch._dynamo.explain`` on the same function, in its own process."""

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
        import torchvision

        return (torchvision.models.efficientnet_b0(weights=None, num_classes=10), torch.randn(2, 3, 32, 32),
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
    p.add_argument("--model", default="qwen2")
    p.add_argument("--jump", action="store_true")
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    train_step, x = build(args.model, args.jump)
    step = torch.compile(train_step, backend="openxla")
    for _ in range(args.steps):
        step(x)
        torch_xla.sync()
    print("done", args.model, "jump" if args.jump else "plain")


if __name__ == "__main__":
    main()
