"""Helpers shared by the test modules."""
from __future__ import annotations


def cli(*args, env=None, timeout=900, cwd=None):
    """``python -m autotune ARGS`` in a fresh interpreter, as a user would run it."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


def loss_and_grads(model, batch):
    """The seeds' cross-entropy loss of one batch and the parameters' gradients."""
    import torch.nn.functional as F

    model.zero_grad()
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]
