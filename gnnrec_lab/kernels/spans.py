"""How a kernel call is recorded: :class:`Span` times the pieces of one autograd Function body back
to back into the active :class:`~gnnrec_lab.util.recorder.Recorder`."""
from __future__ import annotations

import threading
import time
from typing import Callable

import torch

from gnnrec_lab.config.run import PRECISIONS
from gnnrec_lab.kernels import costs
from gnnrec_lab.util.recorder import get_recorder, profiler_active, profiler_range


class Span:
    """Times the pieces of one autograd Function body back to back: the first record starts
    when the body starts, each later one where the previous record's bookkeeping ended. The
    body's own Python (argument conversion, output allocation) is then inside a record, as it
    is inside torch.profiler's event for the Function; the recorder's bookkeeping (``cost()``,
    the record itself) and compilation time are not. Public for code outside the kernels that
    records a piece of work the same way (train's optimizer-step hooks)."""
    __slots__ = ("recorder", "t0", "jit0")

    def __init__(self):
        self.recorder = recorder = get_recorder()
        if recorder.enabled:
            self.jit0 = recorder.jit_seconds
            self.t0 = time.perf_counter_ns()

    def run(self, name, layer, phase, backend_name, cost: Callable[[], dict], fn, *args, profile: bool = True):
        """Run ``fn(*args)``; when recording, record the time since the span's last mark under
        ``name`` with ``cost()``'s bytes and flops, and set the mark after the bookkeeping. Under
        an active torch profiler ``fn`` runs inside ``record_function("gnnrec_lab.<name>.<phase>")``
        (``profile=False``: the caller holds that range itself)."""
        if profile and profiler_active():
            with profiler_range(name, phase or self.recorder.phase):
                out = fn(*args)
        else:
            out = fn(*args)
        recorder = self.recorder
        if recorder.enabled:
            recorder.record(name, recorder.ns_since(self.t0, self.jit0), layer=layer, phase=phase,
                            backend=backend_name, **cost())
            self.jit0 = recorder.jit_seconds
            self.t0 = time.perf_counter_ns()
        return out


_pending = threading.local()  # the span _apply started for the forward it is about to run


def _apply(fn_cls, *args):
    """``fn_cls.apply(*args)`` with the forward's recording span started before torch's Function
    machinery runs (unpacking the arguments, building the graph node), so the forward's records
    cover the call as torch.profiler's event for it does."""
    _pending.span = Span()
    try:
        return fn_cls.apply(*args)
    finally:
        _pending.span = None


def _forward_span() -> Span:
    """The span :func:`_apply` started for this forward (a new one when called otherwise)."""
    span = getattr(_pending, "span", None)
    _pending.span = None
    return span if span is not None else Span()


def _timed(name, layer, phase, backend_name, cost: Callable[[], dict], fn, *args):
    """Run ``fn(*args)``; when recording, record its time (minus JIT) and ``cost()``."""
    return Span().run(name, layer, phase, backend_name, cost, fn, *args)


def _elem(t: torch.Tensor) -> int:
    return t.element_size()


def _check_features(adj, name: str, t: torch.Tensor, n: int, what: str, bf16: bool = False) -> None:
    """``t`` is (n, D) float32 or float64 (or bfloat16 where ``bf16``)."""
    if t.dim() != 2 or t.shape[0] != n:
        raise ValueError(f"{name}: expected ({n}, D) rows for the CSR's {what}, got {tuple(t.shape)}")
    if t.dtype not in (torch.float32, torch.float64) and not (bf16 and t.dtype == torch.bfloat16):
        raise ValueError(f"{name}: dtype must be float32 or float64{' (or bfloat16)' if bf16 else ''}, got {t.dtype}")


def _check_precision(name: str, precision: str, x: torch.Tensor, bname: str) -> bool:
    """Whether ``precision`` asks for bf16 propagation (ValueError for an unknown precision, for a
    bf16 input that is not float32, or for bf16 on a backend other than native)."""
    if precision not in PRECISIONS:
        raise ValueError(f"{name}: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return False
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"{name}: precision {precision!r} propagates float32 inputs, got {x.dtype}")
    if bname != "native":
        raise ValueError(f"{name}: precision {precision!r} runs on the native backend only, got backend {bname!r}")
    return True


def _narrow(span, be, bname, t: torch.Tensor, layer: int, phase=None) -> torch.Tensor:
    """``t`` rounded to bfloat16 (ties to even), recorded as ``narrow`` (one streaming pass: 4 bytes
    read and 2 written per element)."""
    n = t.numel()
    return span.run("narrow", layer, phase, bname, lambda: costs.kernel_cost(4 * n, 2 * n, 0, "stream"),
                    be.narrow, t)
