"""What is a run? One validated :class:`RunConfig`.

The CLI, the dashboards, the notebooks, the runner and the store all build and
read this one object. Validation happens here, once, at the door: each error
names the field, the value given and what is allowed.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import ConfigError

MODELS = ("lightgcn", "ngcf", "mf")
NGCF_FORMS = ("edge", "node")
OPTIMIZERS = ("adam", "adamw", "sgd", "lamb")
LR_RULES = ("none", "linear", "sqrt")
SCHEDULES = ("none", "cosine", "step")
BACKENDS = ("native", "torch", "dgl")
MODES = ("full", "sampled")
# Embedding-cache replacement policies, the one list every view shows in this order
# (gnnrec_lab.cache.policies implements each; the simulator runs them all). none: no cache, every
# row read from and written back to the slow tier every batch; belady: the offline optimum (it needs
# the whole future), so only the simulator runs it.
SIMULATED_CACHE_POLICIES = ("none", "lru", "lfu", "static", "oracle", "belady")
# what the real cached tier (gnnrec_lab.cache.cached_rows) runs: every policy but the offline one
TIER_CACHE_POLICIES = tuple(p for p in SIMULATED_CACHE_POLICIES if p != "belady")
# A run's cache_policy. none: table in DRAM (no slow tier); stream: slow tier, no cache (the tier's
# "none"); the others: slow tier behind a DRAM cache of cache_size rows.
CACHE_POLICIES = ("none", "stream") + tuple(p for p in TIER_CACHE_POLICIES if p != "none")
# How a cache study's access trace is made (gnnrec_lab.cache.study): "mf" BPR batches of a 0-layer
# model, "sampled" k-hop sub-graph batches.
CACHE_TRACE_KINDS = ("mf", "sampled")
# Memory modes a run can be launched in. "dram" is measured here; the others are
# measured where the hardware exists and modeled (labelled so) elsewhere.
MEMORY_MODES = ("dram", "optane_memory_mode", "optane_app_direct", "cxl", "remote_numa")
# Tensor classes whose placement can be chosen (see gnnrec_lab.memory).
TENSOR_CLASSES = ("graph", "embeddings", "optimizer", "gradients", "activations",
                  "edge_intermediates", "buffers")


# Largest value each integer field accepts: far beyond any run this lab can hold, small enough
# that a typo (``--dim 10**12``) is refused here instead of failing deep inside an allocation.
MAXIMA = {"layers": 64, "dim": 65_536, "batch_size": 1 << 27, "epochs": 1_000_000, "ref_batch_size": 1 << 27,
          "warmup_steps": 1 << 40, "eval_every": 1_000_000, "patience": 1_000_000, "eval_users": 1 << 31,
          "max_steps_per_epoch": 1 << 40, "lookahead": 1_000_000, "threads": 1024, "fanouts": 1_000_000,
          "topk": 100_000, "cache_size": 1 << 40}
MAX_SEED = 2**32 - 1     # numpy/numba seed range


@dataclass
class RunConfig:
    """One training run. All sizes in elements unless a name says bytes."""

    dataset: str = "ml-100k"
    model: str = "lightgcn"
    ngcf_form: str = "edge"          # NGCF only: edge-wise (per-edge messages) or node-wise
    layers: int = 3
    dim: int = 64
    batch_size: int = 2048
    epochs: int = 200                # the reference protocol's cap (RecBole 1.2.1 runs, docs/accuracy.md)
    lr: float = 1e-3
    l2: float = 1e-4
    optimizer: str = "adam"
    momentum: float = 0.9            # SGD only
    weight_decay: float = 0.0        # AdamW / LAMB decoupled decay
    lr_rule: str = "none"            # scale lr with batch size relative to ref_batch_size
    ref_batch_size: int = 2048
    warmup_steps: int = 0
    warmup_epochs: float = 0.0
    schedule: str = "none"           # after warm-up
    seed: int = 2020
    backend: str = "native"
    mode: str = "full"
    fanouts: tuple = (10, 10, 10)    # sampled mode only
    topk: tuple = (10, 20)
    eval_every: int = 1              # epochs
    patience: int = 30               # epochs without a new best valid Recall@20 before stopping; 0 = never
                                     # (outlasts LightGCN's epoch 23-45 plateau on ML-100K: train.EarlyStopping)
    target_recall: Optional[float] = None   # time-to-accuracy target on validation Recall@20
    eval_users: Optional[int] = None        # evaluate a seeded sample of users (None = all)
    max_steps_per_epoch: Optional[int] = None  # cap for quick runs and tests
    cache_policy: str = "none"       # sampled mode: DRAM cache in front of a slow-tier embedding table
    cache_size: str = "5%"           # rows ("50000") or share of rows ("5%")
    lookahead: int = 200             # batches the oracle policy sees ahead
    memory_mode: str = "dram"
    placement: dict = field(default_factory=dict)   # tensor class -> "dram" | "file:DIR" | "numa:POLICY:NODES"
    device_profile: Optional[str] = None            # tier-model target for modeled modes
    threads: Optional[int] = None
    data_dir: Optional[str] = None
    name: Optional[str] = None       # free-form label

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------
    def validate(self) -> "RunConfig":
        def choice(param, allowed):
            v = getattr(self, param)
            if v not in allowed:
                raise ConfigError(param, f"got {v!r}, allowed: {', '.join(allowed)}")

        def pos_int(param, minimum=1, maximum=None):
            v = getattr(self, param)
            maximum = MAXIMA.get(param) if maximum is None else maximum
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum or (maximum is not None and v > maximum):
                bound = f">= {minimum}" + (f" and <= {maximum:,}" if maximum is not None else "")
                raise ConfigError(param, f"must be an integer {bound}, got {v!r}")

        def pos_float(param, allow_zero=False, maximum=None):
            v = getattr(self, param)
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  and (v > 0 or (allow_zero and v == 0)) and (maximum is None or v <= maximum))
            if not ok:
                what = f"a finite {'non-negative' if allow_zero else 'positive'} number"
                if maximum is not None:
                    what += f" <= {maximum:g}"
                raise ConfigError(param, f"must be {what}, got {v!r}")

        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError("dataset", f"must be a dataset name, got {self.dataset!r}")
        choice("model", MODELS)
        choice("ngcf_form", NGCF_FORMS)
        if self.model == "mf":
            pos_int("layers", 0)
            if self.layers != 0:
                raise ConfigError("layers", f"model 'mf' has no propagation layers; use 0, got {self.layers}")
        else:
            if isinstance(self.layers, bool) or not isinstance(self.layers, int) or not 1 <= self.layers <= 64:
                raise ConfigError("layers", f"must be an integer from 1 to 64 for {self.model} "
                                            f"(model 'mf' has 0 layers), got {self.layers!r}")
        pos_int("dim")
        pos_int("batch_size")
        pos_int("epochs")
        pos_float("lr")
        pos_float("l2", allow_zero=True)
        pos_float("momentum", allow_zero=True, maximum=1.0)
        pos_float("weight_decay", allow_zero=True)
        choice("optimizer", OPTIMIZERS)
        choice("lr_rule", LR_RULES)
        pos_int("ref_batch_size")
        pos_int("warmup_steps", 0)
        pos_float("warmup_epochs", allow_zero=True, maximum=float(MAXIMA["epochs"]))
        choice("schedule", SCHEDULES)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError("seed", f"must be an integer from 0 to {MAX_SEED} (2**32 - 1), got {self.seed!r}")
        choice("backend", BACKENDS)
        choice("mode", MODES)
        self.fanouts = tuple(self.fanouts)
        if not self.fanouts or len(self.fanouts) > 64 or any(
                isinstance(f, bool) or not isinstance(f, int) or not 1 <= f <= MAXIMA["fanouts"] for f in self.fanouts):
            raise ConfigError("fanouts", f"must be 1 to 64 integers from 1 to {MAXIMA['fanouts']:,}, "
                                         f"got {self.fanouts!r}")
        if self.mode == "sampled" and self.model != "mf" and len(self.fanouts) != self.layers:
            raise ConfigError("fanouts", f"needs one fan-out per layer ({self.layers}), got {len(self.fanouts)}")
        self.topk = tuple(sorted(set(self.topk)))
        if not self.topk or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAXIMA["topk"]
                                for k in self.topk):
            raise ConfigError("topk", f"must be integers from 1 to {MAXIMA['topk']:,}, got {self.topk!r}")
        pos_int("eval_every")
        pos_int("patience", 0)
        if self.target_recall is not None and (isinstance(self.target_recall, bool)
                                               or not isinstance(self.target_recall, (int, float))
                                               or not 0 < self.target_recall <= 1):
            raise ConfigError("target_recall", f"must be in (0, 1], got {self.target_recall!r}")
        if self.eval_users is not None:
            pos_int("eval_users")
        if self.max_steps_per_epoch is not None:
            pos_int("max_steps_per_epoch")
        choice("cache_policy", CACHE_POLICIES)
        if self.cache_policy != "none" and self.mode != "sampled":
            raise ConfigError("cache_policy", f"an embedding cache needs mode='sampled', got mode={self.mode!r}")
        cs = str(self.cache_size).strip()
        try:
            ok = (0 < float(cs[:-1]) <= 100) if cs.endswith("%") else 0 < int(cs) <= MAXIMA["cache_size"]
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError("cache_size", f"must be a row count from 1 to {MAXIMA['cache_size']:,} (e.g. 50000) "
                                            f"or a share of rows in (0, 100]% (e.g. 5%), got {self.cache_size!r}")
        self.cache_size = cs
        pos_int("lookahead")
        choice("memory_mode", MEMORY_MODES)
        from .memory.placement import parse_placement
        parse_placement(self.placement)
        if self.threads is not None:
            pos_int("threads")
        if self.data_dir is not None and (not isinstance(self.data_dir, str) or not self.data_dir.strip()
                                          or "\0" in self.data_dir):
            raise ConfigError("data_dir", f"must be a directory path (or unset for the default), got {self.data_dir!r}")
        if self.device_profile is not None and (not isinstance(self.device_profile, str)
                                                or not self.device_profile.strip()):
            raise ConfigError("device_profile", f"must be a device profile name, got {self.device_profile!r}")
        if self.name is not None and (not isinstance(self.name, str) or len(self.name) > 200):
            raise ConfigError("name", f"must be a label of at most 200 characters, got {str(self.name)[:40]!r}")
        return self

    # ------------------------------------------------------------------
    @property
    def effective_lr(self) -> float:
        """Learning rate after the batch-size scaling rule."""
        ratio = self.batch_size / self.ref_batch_size
        if self.lr_rule == "linear":
            return self.lr * ratio
        if self.lr_rule == "sqrt":
            return self.lr * ratio ** 0.5
        return self.lr

    @property
    def measured(self) -> bool:
        """Whether time in this run is measured on its memory mode (True for DRAM)."""
        return self.memory_mode == "dram"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["fanouts"] = list(self.fanouts)
        d["topk"] = list(self.topk)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; allowed: {', '.join(sorted(known))}")
        return cls(**d)

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)
