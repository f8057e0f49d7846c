"""A DistDGL run's result from its trainers' reports: the per-batch time split (:data:`PHASES`),
bytes between partitions, the neighbourhood-explosion factor (:func:`summarize`), folded into
trainer 0's result from the lab's loop (:func:`run_result`): what the store records and ``--json``
prints."""
from __future__ import annotations

import numpy as np

from gnnrec_lab.util.provenance import Provenance

ENGINE = "distdgl"
PHASES = ("sampling", "remote_fetch", "compute", "grad_sync")
GLUE = ("degree_fetch", "block_csr")   # the lab's own work inside DistDGL's phases, timed apart


def summarize(reports: list[dict]) -> dict:
    """Per-batch time split (median over every trainer's batches), its sum against the measured
    batch time, bytes between partitions (counted), the neighbourhood-explosion factor."""
    rows = [b for r in reports for b in r.get("batches", [])]
    if not rows:
        return {}
    med = {k: float(np.median([b[k] for b in rows])) for k in PHASES + ("total",)}
    mean = {k: float(np.mean([b[k] for b in rows])) for k in PHASES + ("total",)}
    rb = reports[0]["row_bytes"]
    n_nodes = reports[0]["n_nodes"]
    fetch = sum(b["remote_rows"] for b in rows) * (rb + 4)       # embedding row + degree
    grads = sum(b["remote_rows"] for b in rows) * (rb + 8)       # row gradient + id
    edges = sum(b["remote_edges"] for b in rows) * 16            # sampled (src, dst) pairs
    n_batches = len(rows)
    # the lab's own glue inside the phases (remote_fetch holds the degree fetch, compute the
    # block -> CSR conversion): what DistDGL's own examples would not do, median per batch
    glue = {k: float(np.median([b[f"glue_{k}"] for b in rows])) for k in GLUE if f"glue_{k}" in rows[0]}
    return {
        "batch_seconds_median": med, "batch_seconds_mean": mean, "glue_seconds_median": glue,
        "glue_share_of_batch": sum(glue.values()) / med["total"] if glue and med["total"] else None,
        "phase_sum_over_batch": sum(mean[k] for k in PHASES) / mean["total"] if mean["total"] else float("nan"),
        "bytes_between_partitions": {"embedding_fetch": fetch, "gradient_push": grads, "sampled_edges": edges,
                                     "total": fetch + grads + edges, "per_batch": (fetch + grads + edges) / n_batches,
                                     "kind": "counted (remote rows x row bytes)"},
        "input_nodes_per_batch": float(np.mean([b["input_nodes"] for b in rows])),
        "seeds_per_batch": float(np.mean([b["seeds"] for b in rows])),
        "explosion_factor": float(np.mean([b["input_nodes"] for b in rows])) / n_nodes,
        "remote_row_share": sum(b["remote_rows"] for b in rows) / max(1, sum(b["input_nodes"] for b in rows)),
        # trainer 0's timed batches against its measured epoch time (the rest: store writes, loop)
        "batch_time_share_of_epoch": (sum(b["total"] for b in reports[0]["batches"])
                                      / max(sum(reports[0]["epoch_seconds"]), 1e-12)),
        "batches": n_batches,
    }


def run_result(reports: list[dict], info: dict, wall: float, links=None, config=None) -> dict:
    """The run's result, what the store records, ``--json`` prints and the CLI's lines read: trainer
    0's result from the lab's loop (epochs, steps, times, evaluations, best epoch, test, the
    target reached or not) with every trainer's measurements folded in (:func:`summarize`)."""
    r0 = reports[0]
    res = r0["result"]
    summary = summarize(reports)
    keys = ("status", "epochs", "steps", "train_seconds", "epoch_seconds", "best_epoch", "best_valid", "test",
            "history", "time_to_target_s", "target", "kernels")
    return {
        "engine": ENGINE, "kind": Provenance.MEASURED, **{k: res[k] for k in keys},
        "config": config.to_dict() if config else res["config"],
        "phases": {k: float(sum(b[k] for b in r0["batches"])) for k in PHASES},
        "info": {**{k: v for k, v in res["info"].items() if k in ("diverged", "stopped")},
                 "engine": ENGINE, "distributed": info},
        "distributed": {**summary, "wall_seconds": wall,
                        "startup_seconds": [r["startup_seconds"] for r in reports],
                        "trainer_peak_rss_bytes": [r.get("peak_rss_bytes") for r in reports],
                        "row_check": [r["check"] for r in reports],
                        "trainer_cores": [r.get("cores") for r in reports],
                        "trainer_gloo_interface": [r.get("gloo_interface") for r in reports],
                        "steps_per_epoch": r0["steps_per_epoch"], "per_trainer_batch": r0["per_trainer_batch"],
                        "local_interactions": [r["local_interactions"] for r in reports],
                        # the learning rate the trainers' optimizers ran (first step, peak, last step)
                        "lr": [r.get("lr") for r in reports],
                        "cluster": {**info["cluster"], "link_bytes": links,
                                    "link_bytes_kind": None if links is None else
                                    "measured (each machine's interface counters over the run)"}},
    }
