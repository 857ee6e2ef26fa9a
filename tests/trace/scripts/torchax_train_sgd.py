"""Train a small regression model with a hand-written SGD with momentum, as a torch user porting
torch.optim.SGD writes it for torchax: the loss's gradient comes from interop.jax_value_and_grad over
the module's functional call, the step is jitted with interop.jax_jit, the momentum buffers are
created at the first step (as torch.optim.SGD creates its momentum_buffer), and the learning rate is
a Python float that decays each step."""

import argparse

import torch
import torchax
from torchax import interop


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    args = p.parse_args()

    torch.manual_seed(0)
    env = torchax.default_env()
    with env:
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to("jax")
        jittable = interop.JittableModule(model)
        params, buffers = jittable.params, jittable.buffers

        def loss_fn(params, buffers, x, y):
            pred = jittable.functional_call("forward", params, buffers, x)
            return torch.nn.functional.mse_loss(pred, y)

        value_and_grad = interop.jax_value_and_grad(loss_fn)

        def sgd_step(params, buffers, momentum_buffers, x, y, lr):
            loss, grads = value_and_grad(params, buffers, x, y)
            new_buffers = {}
            for name, g in grads.items():
                buf = momentum_buffers.get(name)
                new_buffers[name] = g if buf is None else args.momentum * buf + g
            params = {name: w - lr * new_buffers[name] for name, w in params.items()}
            return loss, params, new_buffers

        step_fn = interop.jax_jit(sgd_step)
        momentum_buffers = {}
        w_true = torch.randn(16, 1, device="jax")
        lr = args.lr
        for step in range(args.steps):
            x = torch.randn(args.batch, 16, device="jax")
            y = x @ w_true
            loss, params, momentum_buffers = step_fn(params, buffers, momentum_buffers, x, y, lr)
            lr *= 0.9
        print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
