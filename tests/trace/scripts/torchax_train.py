"""Train a small classifier the way torchax's own example does: the model's functional call under
torchax.train.make_train_step with an optax optimizer, jitted with interop.jax_jit. The learning
rate follows a hand-written schedule (linear warmup in Python floats, then a cosine decay computed
with numpy) written into optax.inject_hyperparams' state before each step; the data loader keeps its
short last batch."""

import argparse

import numpy as np
import optax
import torch
import torchax
from torchax import interop, train


class Classifier(torch.nn.Module):
    def __init__(self, features=32, hidden=64, classes=10):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.nn.functional.relu(self.fc1(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=72)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-2)
    args = p.parse_args()

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(args.samples, 32), torch.randint(0, 10, (args.samples,)))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True)
    total = args.epochs * len(loader)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, total - args.warmup)
        return args.lr * 0.5 * (1 + np.cos(np.pi * progress))

    torchax.enable_globally()
    model = Classifier().to("jax")
    jittable = interop.JittableModule(model)
    weights, buffers = jittable.params, jittable.buffers
    optimizer = optax.inject_hyperparams(optax.adamw)(learning_rate=args.lr)
    opt_state = interop.call_jax(optimizer.init, weights)

    def model_fn(weights, buffers, batch):
        return jittable.functional_call("forward", weights, buffers, *batch)

    train_step = interop.jax_jit(train.make_train_step(model_fn, torch.nn.functional.cross_entropy, optimizer))

    step = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            x, y = x.to("jax"), y.to("jax")
            opt_state.hyperparams["learning_rate"] = lr_at(step)
            loss, weights, opt_state = train_step(weights, buffers, opt_state, (x,), y)
            step += 1
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torchax.disable_globally()


if __name__ == "__main__":
    main()
