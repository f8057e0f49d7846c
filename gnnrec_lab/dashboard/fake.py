"""Fill a store with fake runs, for the dashboard's tests and load benchmark.

Every run written here is named ``fake-<n>`` so it can never be mistaken for a
real measurement; the numbers are random draws, not results. Use only on a
throw-away store (``GNNREC_LAB_HOME`` pointing at a temporary directory).
"""
from __future__ import annotations

import numpy as np

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.util.recorder import KernelRecord
from gnnrec_lab.util.status import RunStatus

# the kernels a real full-graph LightGCN step records (fused loss terms, no separate gathers)
KERNELS = (("spmm", "forward", "gather"), ("spmm", "backward", "gather"), ("bpr_loss", "loss", "gather"),
           ("l2_reg", "loss", "gather"), ("adam", "optimizer", "stream"), ("bpr_sample", "sampling", "gather"))


def fake_records(step: int, layers: int, dim: int, rng) -> list:
    """Kernel records of one fake step (times in ns, bytes/flops scaled by dim)."""
    out = []
    for name, phase, pattern in KERNELS:
        for layer in (range(layers) if name == "spmm" else [-1]):
            ns = int(rng.uniform(0.5, 2.0) * 1e6 * dim / 64)
            br = int(4e6 * dim / 64)
            out.append(KernelRecord(name, phase, layer, step, ns, br, br // 4, int(2e6 * dim / 64), pattern,
                                    dim * 4 if pattern != "stream" else 0, br if pattern != "stream" else 0,
                                    "native"))
    return out


def fill_store(store, n_runs: int = 10, steps: int = 20, epochs: int = 2, seed: int = 0,
               kernels: bool = True, first: int = 0) -> list[int]:
    """Write ``n_runs`` finished fake runs (named ``fake-<first + i>``) with ``steps`` steps each; return their ids."""
    rng = np.random.default_rng(seed)
    ids = []
    for i in range(n_runs):
        layers = int(rng.integers(1, 5))
        dim = int(rng.choice([32, 64, 128]))
        cfg = RunConfig(dataset="synth-tiny", model=str(rng.choice(["lightgcn", "ngcf"])), layers=layers,
                        dim=dim, batch_size=int(rng.choice([512, 1024, 2048, 4096])), epochs=epochs,
                        name=f"fake-{first + i}")
        rid = store.add_run(cfg, status=RunStatus.RUNNING)
        store.record_start(rid, {"steps_per_epoch": steps // epochs,
                                 "footprint_predicted": {"graph": 2_000_000, "embeddings": 700 * dim * 4 * (layers + 1),
                                                         "optimizer": 2 * 700 * dim * 4}})
        per_epoch = steps // epochs
        for s in range(1, steps + 1):
            recs = fake_records(s, layers, dim, rng) if kernels else ()
            store.add_step(rid, s, (s - 1) // per_epoch + 1, float(1 / s + rng.uniform(0, .05)),
                           float(rng.uniform(0.01, 0.05)), recs)
            if s % per_epoch == 0:
                e = s // per_epoch
                store.add_epoch(rid, e, float(rng.uniform(0.2, 1.0)), per_epoch, 1 / s)
                store.add_eval(rid, e, s, "valid", {"recall@20": 0.05 * e + rng.uniform(0, .01),
                                                    "ndcg@20": 0.03 * e}, float(s))
        store.set_status(rid, RunStatus.FINISHED)
        ids.append(rid)
    return ids
