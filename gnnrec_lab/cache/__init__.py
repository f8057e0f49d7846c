"""Embedding-row caching in front of a slow tier: access traces, policies, a simulator.

``traces`` turns mini-batches into row-access traces, ``policies`` holds the
replacement policies (none, LRU, LFU, static, look-ahead oracle, Belady) behind
one interface, and ``simulate`` runs them and sweeps capacity and look-ahead.
"""
from .policies import POLICIES, Policy, make_policy
from .simulate import SimResult, next_use, parse_capacity, row_bytes, simulate, sweep
from .traces import Trace, mf_trace, sampled_trace, skew

__all__ = ["Trace", "mf_trace", "sampled_trace", "skew", "Policy", "POLICIES", "make_policy",
           "SimResult", "simulate", "sweep", "next_use", "parse_capacity", "row_bytes"]
