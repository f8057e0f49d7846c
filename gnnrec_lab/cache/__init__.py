"""Embedding-row caching in front of a slow tier: access traces, policies, a simulator.

``traces`` turns mini-batches into row-access traces, ``policies`` holds the
replacement policies (none, LRU, LFU, static, look-ahead oracle, Belady) behind
one interface, ``simulate`` runs them and sweeps capacity and look-ahead. The real
cached tier sampled-mode training uses: ``slow_tier`` (an O_DIRECT file; ``aio`` its
Linux native AIO), ``cached_rows`` (a DRAM cache in front of it, the row store), and
``oracle_table`` (the trace-driven oracle cache that checks the simulator on real I/O).
"""
from gnnrec_lab.cache.policies import POLICIES, Policy, make_policy
from gnnrec_lab.cache.simulate import SimResult, next_use, parse_capacity, row_bytes, simulate, sweep
from gnnrec_lab.cache.slow_tier import SlowTier
from gnnrec_lab.cache.traces import Trace, mf_trace, sampled_trace, skew


def __getattr__(name):
    # the real cached tier needs torch; import it only when asked for (the simulator CLI stays light)
    if name in ("CachedRows", "make_cached_rows"):
        from gnnrec_lab.cache import cached_rows
        return getattr(cached_rows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CachedRows", "SlowTier", "make_cached_rows", "Trace", "mf_trace", "sampled_trace", "skew", "Policy",
           "POLICIES", "make_policy", "SimResult", "simulate", "sweep", "next_use", "parse_capacity", "row_bytes"]
