"""Embedding-row caching in front of a slow tier: access traces, policies, a simulator.

``traces`` turns mini-batches into row-access traces, ``policies`` holds the
replacement policies (none, LRU, LFU, static, look-ahead oracle, Belady) behind
one interface, ``simulate`` runs them and sweeps capacity and look-ahead, and ``tier`` is the
real cached tier sampled-mode training uses (an O_DIRECT file behind a DRAM cache).
"""
from .policies import POLICIES, Policy, make_policy
from .simulate import SimResult, next_use, parse_capacity, row_bytes, simulate, sweep
from .traces import Trace, mf_trace, sampled_trace, skew



def __getattr__(name):
    # the real cached tier needs torch; import it only when asked for (the simulator CLI stays light)
    if name in ("CachedRows", "SlowTier", "make_cached_rows"):
        from . import tier
        return getattr(tier, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CachedRows", "SlowTier", "make_cached_rows", "Trace", "mf_trace", "sampled_trace", "skew", "Policy", "POLICIES", "make_policy",
           "SimResult", "simulate", "sweep", "next_use", "parse_capacity", "row_bytes"]
