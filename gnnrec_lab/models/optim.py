"""Optimizers and the learning-rate schedule of a run.

Adam is torch's fused CPU Adam (``torch.optim.Adam(fused=True)``: one pass per tensor; as fast
as the lab's own one-pass native Adam it replaced, docs/measurements.md); AdamW and SGD (with
momentum) are torch's; LAMB (You et al., ICLR 2020)
is implemented here since torch has none. :func:`lr_at` gives the learning
rate of a step: the batch-size scaling rule, a linear warm-up, then an
optional schedule.
"""
from __future__ import annotations

import math

import torch


class LAMB(torch.optim.Optimizer):
    r"""Layer-wise Adaptive Moments for Batch training.

    Per parameter tensor: Adam moments ``m, v`` with bias correction, update
    ``r = m_hat / (sqrt(v_hat) + eps) + wd * p``, trust ratio
    ``phi = ||p|| / ||r||`` (1 when either norm is 0), ``p -= lr * phi * r``.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group, p, st in _with_grads(self):
            b1, b2 = group["betas"]
            if not st:
                st["step"] = 0
                st["m"] = torch.zeros_like(p)
                st["v"] = torch.zeros_like(p)
            st["step"] += 1
            m, v, t = st["m"], st["v"], st["step"]
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            r = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt_().add_(group["eps"]))
            if group["weight_decay"]:
                r.add_(p, alpha=group["weight_decay"])
            pn, rn = p.norm().item(), r.norm().item()
            trust = pn / rn if pn > 0 and rn > 0 else 1.0
            p.add_(r, alpha=-group["lr"] * trust)
        return loss


def _with_grads(opt):
    """``(group, parameter, state)`` for every parameter of ``opt`` that has a gradient."""
    for group in opt.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                yield group, p, opt.state[p]


def fused_cpu_adam() -> bool:
    """Whether this torch has a fused CPU Adam (torch 2.4 and later; the DGL lane's 2.2.1 has not,
    and there Adam falls back to torch's default, foreach, 2.4-3.3x slower per step)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return False
    return "cpu" in _get_fused_kernels_supported_devices()


def build_optimizer(config, params):
    """The optimizer named by ``config.optimizer`` at the config's effective lr."""
    lr = config.effective_lr
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, fused=True) if fused_cpu_adam() else torch.optim.Adam(params, lr=lr)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=config.momentum)
    if config.optimizer == "lamb":
        return LAMB(params, lr=lr, weight_decay=config.weight_decay)
    raise ValueError(config.optimizer)


def state_tensors(optimizer_name: str, momentum: float = 0.9) -> int:
    """How many parameter-sized state tensors the optimizer keeps."""
    return {"adam": 2, "adamw": 2, "lamb": 2, "sgd": 1 if momentum else 0}[optimizer_name]


def lr_at(step: int, config, steps_per_epoch: int, total_steps: int) -> float:
    """Learning rate for 0-based ``step``: scaled base lr x warm-up x schedule."""
    base = config.effective_lr
    warm = max(config.warmup_steps, int(round(config.warmup_epochs * steps_per_epoch)))
    if warm and step < warm:
        return base * (step + 1) / warm
    if config.schedule == "none":
        return base
    span = max(total_steps - warm, 1)
    frac = min(max(step - warm, 0) / span, 1.0)
    if config.schedule == "cosine":
        return base * 0.5 * (1 + math.cos(math.pi * frac))
    # "step": divide by 10 at 50% and 75% of the post-warm-up steps
    return base * (0.1 ** (int(frac >= 0.5) + int(frac >= 0.75)))


class SparseRowAdam:
    """Adam that updates only the rows a batch touched (lazy, like ``torch.optim.SparseAdam``).

    Used for the embedding table in sampled mini-batch mode: a step reads and
    writes ``len(rows)`` rows of the table and of its two moment tables,
    nothing else. Moments may live in any tensor (e.g. a file-backed tier).
    """

    def __init__(self, table: torch.Tensor, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 m: torch.Tensor | None = None, v: torch.Tensor | None = None):
        self.table, self.lr, self.betas, self.eps = table, lr, betas, eps
        self.m = torch.zeros_like(table) if m is None else m
        self.v = torch.zeros_like(table) if v is None else v
        self.t = 0

    @torch.no_grad()
    def step(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """Apply ``grad`` (len(rows) x D) to the distinct ``rows`` of the table."""
        b1, b2 = self.betas
        self.t += 1
        m = self.m[rows].mul_(b1).add_(grad, alpha=1 - b1)
        v = self.v[rows].mul_(b2).addcmul_(grad, grad, value=1 - b2)
        self.m[rows] = m
        self.v[rows] = v
        step = self.lr * math.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
        self.table[rows] = self.table[rows] - step * m / (v.sqrt_().add_(self.eps))
