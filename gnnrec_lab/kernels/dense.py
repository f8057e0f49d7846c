"""Dense ops run by torch and recorded like the sparse kernels: GEMM, element-wise functions, linear
combinations (layer sums)."""
from __future__ import annotations

from typing import Callable

import torch

from gnnrec_lab.kernels import costs
from gnnrec_lab.kernels.spans import Span, _apply, _elem, _forward_span, _timed


class _GEMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, layer):
        span = _forward_span()
        ctx.layer = layer
        ctx.save_for_backward(x, w)
        m, k = x.shape
        return span.run("gemm", layer, None, "torch", lambda: costs.gemm(m, k, w.shape[1], _elem(x)), torch.mm, x, w)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        x, w = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]

        def grads():
            return (g.mm(w.t()) if need_x else None, x.t().mm(g) if need_w else None)
        gx, gw = span.run("gemm", ctx.layer, "backward", "torch",
                          lambda: costs.gemm_backward(x.shape[0], x.shape[1], w.shape[1], _elem(x), need_x, need_w),
                          grads)
        return gx, gw, None


def gemm(x: torch.Tensor, w: torch.Tensor, *, layer: int = -1) -> torch.Tensor:
    """``x @ w`` for 2-D ``x`` (m, k) and ``w`` (k, n) via torch; forward and backward recorded."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"gemm: expected (m,k) @ (k,n), got {tuple(x.shape)} @ {tuple(w.shape)}")
    return _apply(_GEMM, x, w, layer)


def _elementwise_cost(tensors, out) -> dict:
    return costs.kernel_cost(sum(t.numel() * _elem(t) for t in tensors), out.numel() * _elem(out), out.numel(),
                             "stream")


class _Elementwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, fn, layer, *tensors):
        span = _forward_span()
        ctx.name, ctx.layer = name, layer
        ins = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
        held = []

        def run():
            with torch.enable_grad():  # keep fn's own graph for the backward
                held.append(fn(*ins))
            return held[0]
        out = span.run(name, layer, None, "torch", lambda: _elementwise_cost(tensors, held[0]), run)
        ctx.ins, ctx.out = ins, out
        return out.detach()

    @staticmethod
    def backward(ctx, g):
        span = Span()
        ins, out = ctx.ins, ctx.out
        wanted = [t for t in ins if t.requires_grad]
        nbytes = lambda ts: sum(t.numel() * _elem(t) for t in ts)  # noqa: E731
        grads = iter(span.run(ctx.name, ctx.layer, "backward", "torch",
                              lambda: costs.kernel_cost(g.numel() * _elem(g) + nbytes(ins), nbytes(wanted), g.numel(),
                                                "stream"),
                              _grad_retained, out, wanted, g))
        return (None, None, None) + tuple(next(grads) if t.requires_grad else None for t in ins)


def _grad_retained(out, inputs, g):
    # retained: the outer graph may be walked again (retain_graph, gradcheck); the
    # inner graph is freed with ctx when the outer one goes
    return torch.autograd.grad(out, inputs, g, retain_graph=True)


def elementwise(name: str, fn: Callable, *tensors: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """``fn(*tensors)`` (a torch elementwise op such as ``F.leaky_relu``), recorded as
    ``name`` with bytes read = all inputs, bytes written = the output, flops = output
    elements. Differentiable through ``fn``; the backward is recorded too (reads the
    incoming gradient and the inputs, writes one gradient per input that needs one)."""
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError(f"elementwise {name}: pass the input tensors positionally (close over scalars in fn)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _apply(_Elementwise, name, fn, layer, *tensors)
    held = []

    def run():
        held.append(fn(*tensors))
        return held[0]
    return _timed(name, layer, None, "torch", lambda: _elementwise_cost(tensors, held[0]), run)


# -- linear combinations ---------------------------------------------------------
class _LinComb(torch.autograd.Function):
    """``sum_i c_i t_i`` with a closed-form backward (``c_i g``): saves no tensor and runs no
    inner autograd graph, unlike :func:`elementwise` (layer sums are on every step's path)."""

    @staticmethod
    def forward(ctx, name, layer, coeffs, *tensors):
        span = _forward_span()
        ctx.name, ctx.layer, ctx.coeffs = name, layer, coeffs
        ctx.shape_bytes = tensors[0].numel() * _elem(tensors[0])

        def run():
            out = tensors[0] * coeffs[0] if coeffs[0] != 1 else tensors[0].clone()
            for c, t in zip(coeffs[1:], tensors[1:]):
                out.add_(t, alpha=c)
            return out
        nb = ctx.shape_bytes
        return span.run(name, layer, None, "torch",
                        lambda: costs.kernel_cost(nb * len(tensors), nb, tensors[0].numel() * len(tensors),
                                                  "stream"), run)

    @staticmethod
    def backward(ctx, g):
        span = Span()
        need = ctx.needs_input_grad[3:]
        nb = ctx.shape_bytes
        scaled = sum(1 for c, n in zip(ctx.coeffs, need) if n and c != 1)

        def run():
            return tuple((g if c == 1 else g * c) if n else None for c, n in zip(ctx.coeffs, need))
        grads = span.run(ctx.name, ctx.layer, "backward", "torch",
                         lambda: costs.kernel_cost(nb, nb * scaled, g.numel() * scaled, "stream"), run)
        return (None, None, None) + grads


def lincomb(name: str, coeffs, *tensors: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """``coeffs[0] * tensors[0] + coeffs[1] * tensors[1] + ...`` (same shapes), recorded as
    ``name``: reads every input, writes the output; the backward reads the gradient and writes
    only the gradients that need scaling (unscaled ones are the incoming gradient itself)."""
    if len(coeffs) != len(tensors) or not tensors:
        raise ValueError(f"lincomb {name}: one coefficient per tensor, got {len(coeffs)} and {len(tensors)}")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ValueError(f"lincomb {name}: shapes differ: {[tuple(t.shape) for t in tensors]}")
    coeffs = tuple(float(c) for c in coeffs)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _apply(_LinComb, name, layer, coeffs, *tensors)
    with torch.no_grad():
        return _LinComb.forward(_Ctx(), name, layer, coeffs, *tensors)




class _Ctx:
    """Stand-in ``ctx`` for calling a Function's forward without autograd."""
