"""DistDGL as the distributed baseline: sampled mini-batch training on a partitioned graph.

The paper the lab follows compares full-graph training on one big-memory machine against
DistDGL. This module runs that baseline with the lab's own pieces wherever DGL is not the
point: the lab's models (``propagate_blocks`` over the sampled blocks, the lab's kernels), the
lab's BPR batches and negatives, the lab's full-ranking evaluation, the lab's run store.
DGL provides the partitioning (METIS), the servers, the distributed neighbour sampling, the
distributed embedding table (``DistEmbedding``) and its ``SparseAdam``.

Layout of one run (``P`` partitions = ``P`` "machines", each one server + one trainer)::

    launch()                       the CLI process: partitions, writes ip_config + spec, records
      └─ machine i (P of them)     ``unshare -m``: private mount namespace, tmpfs on /dev/shm
           ├─ server i             DGL_ROLE=server, serves partition i
           └─ trainer i            DGL_ROLE=client, torch.distributed rank i (gloo)

Why the private /dev/shm: a DGL server publishes its partition in shared memory under names
derived from the graph name, and the trainer on the same machine maps it from there. Two
servers on one host with one /dev/shm use the same names, and trainer 1 then reads partition
0's rows for its own ids, silently (measured: 34,209 of 70,000 feature rows wrong, no error).
Every trainer therefore checks the rows it fetches against the source before training
(:func:`~gnnrec_lab.distributed.trainer.check_rows`); a run with wrong rows fails.

Per mini-batch each trainer times (measured, perf_counter): ``sampling`` (BPR triples, the
distributed neighbour sampling, block construction), ``remote_fetch`` (layer-0 embedding rows and
degrees of the input nodes), ``compute`` (forward, loss, backward with the lab's kernels),
``grad_sync`` (dense gradients all-reduced, ``SparseAdam``'s all-to-all of row gradients and the
update). Bytes between partitions are *counted*: rows (and sampled edges) owned by another
partition times their size in bytes.

This module is the orchestrator (:func:`run`) and every process's entry (``python -m
gnnrec_lab.distributed.engine machine|server|trainer SPEC I``); each job has a module of its own:
:mod:`~gnnrec_lab.distributed.spec` (what a run is), :mod:`~gnnrec_lab.distributed.partition` (the
partitioned graph), :mod:`~gnnrec_lab.distributed.network` (hosts, ports, each process's
environment), :mod:`~gnnrec_lab.distributed.cluster` (the emulated cluster's machines),
:mod:`~gnnrec_lab.distributed.launch` (the launcher), :mod:`~gnnrec_lab.distributed.machine` (a
machine's server and trainer), :mod:`~gnnrec_lab.distributed.trainer` and
:mod:`~gnnrec_lab.distributed.step` (a trainer and its mini-batch), :mod:`~gnnrec_lab.distributed.results`
(the run's result from the trainers' reports), :mod:`~gnnrec_lab.distributed.explosion` (the
neighbourhood explosion without DGL), :mod:`~gnnrec_lab.distributed.lane` (is DGL here).

``--ip-config`` with one ``HOST PORT`` line per machine runs the same trainers across real
machines (each machine then runs ``python -m gnnrec_lab.distributed.engine machine SPEC I`` itself, with
the partition folder at the same path); the single-host path is the tested one.
"""
from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import numpy as np

from gnnrec_lab.distributed.cluster import EmulatedCluster
from gnnrec_lab.distributed.lane import require_dgl
from gnnrec_lab.distributed.launch import launch
from gnnrec_lab.distributed.machine import machine_main, server_main
from gnnrec_lab.distributed.network import free_ports, ip_hosts, is_local
from gnnrec_lab.distributed.partition import partition
from gnnrec_lab.distributed.results import ENGINE, run_result
from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.distributed.trainer import trainer_main
from gnnrec_lab.training.step import target_outcome
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.proc import host_info
from gnnrec_lab.util.status import RunStatus

# -- what the notebook and the Compare page show -------------------------------------------------
TARGET_FRACTION = 0.95   # the default target: this share of the full-graph run's best validation Recall@20
# what a full-graph reference run and a run measured against it must share: the same graph, model,
# depth and batch size, and the same seeded evaluation users (seed, eval_users)
REFERENCE_FIELDS = ("dataset", "model", "layers", "batch_size", "seed", "eval_users")
# the same, for a comparison by depth in which each engine keeps the batch size it does best with
DEPTH_FIELDS = tuple(f for f in REFERENCE_FIELDS if f != "batch_size")

COMPARISON_COLUMNS = ["id", "engine", "dataset", "model", "layers", "batch_size", "epoch_s", "time_to_target_s",
                      "best_valid_recall@20", "test_recall@20", "explosion_factor", "batch_ms", "partitions",
                      "reference_run", "common_target", "common_target_reached", "time_to_common_target_s"]


def engine_of(result: dict) -> str:
    """``full``, ``sampled`` or ``distdgl``: the engine a stored result was trained with."""
    cfg = result.get("config") or {}
    return result.get("engine") or ("full" if cfg.get("mode", "full") == "full" else "sampled")


def reference_target(store, run_id: int, config, fraction: float = TARGET_FRACTION) -> dict:
    """The target ``fraction`` x the best validation Recall@20 of finished full-graph run ``run_id``,
    for a run of ``config`` (a RunConfig): DistSpec's ``target_recall``, ``target_of``,
    ``target_fraction``, ``target_reference``. UserError (naming ``--target-of``) when that run is
    not a finished full-graph run with a validation Recall@20 or differs in a :data:`REFERENCE_FIELDS`."""
    run = store.get_run(run_id, need=("config", "result"))
    if run["status"] is not RunStatus.FINISHED:
        raise UserError(f"--target-of: run {run_id} is {run['status']}, not finished")
    res = run["result"] or {}
    if engine_of(res) != "full":
        raise UserError(f"--target-of: run {run_id} is a {engine_of(res)} run; the target is a share of a "
                        f"full-graph run's best validation Recall@20")
    best = (res.get("best_valid") or {}).get("recall@20")
    if best is None or not np.isfinite(best) or best <= 0:
        raise UserError(f"--target-of: run {run_id} has no positive best validation Recall@20 ({best})")
    ref = run["config"] or {}
    for name in REFERENCE_FIELDS:
        if ref.get(name) != getattr(config, name):
            raise UserError(f"--target-of: run {run_id} has {name} {ref.get(name)!r}, this run "
                            f"--{name.replace('_', '-')} {getattr(config, name)!r}: the target must come from "
                            f"a full-graph run of the same {', '.join(REFERENCE_FIELDS)}")
    return {"target_recall": float(fraction) * float(best), "target_of": int(run_id),
            "target_fraction": float(fraction), "target_reference": float(best)}


def comparison_row(result: dict, run_id=None) -> dict:
    """One run (a RunResult's or a DistDGL run's result dict) as a row of :func:`comparison_frame`
    (its common-target columns are the frame's)."""
    cfg = result.get("config") or {}
    engine = engine_of(result)
    dist = result.get("distributed") or {}
    ep = result.get("epoch_seconds") or []
    batch = (dist.get("batch_seconds_median") or {}).get("total")
    return {"id": run_id, "engine": engine, "dataset": cfg.get("dataset"), "model": cfg.get("model"),
            "layers": cfg.get("layers"), "batch_size": cfg.get("batch_size"),
            "epoch_s": float(np.mean(ep)) if ep else None, "time_to_target_s": result.get("time_to_target_s"),
            "best_valid_recall@20": (result.get("best_valid") or {}).get("recall@20"),
            "test_recall@20": (result.get("test") or {}).get("recall@20"),
            "explosion_factor": dist.get("explosion_factor", 1.0 if engine == "full" else None),
            "batch_ms": None if batch is None else batch * 1e3,
            "partitions": ((result.get("info") or {}).get("distributed") or {}).get("partitions"),
            "reference_run": None, "common_target": None, "common_target_reached": None,
            "time_to_common_target_s": None}


def common_targets(results: list, fraction: float = TARGET_FRACTION, fields=REFERENCE_FIELDS) -> list[dict]:
    """For each ``(run_id, result)``: the target that means the same for every engine, ``fraction``
    x the best validation Recall@20 of the best full-graph run among ``results`` with the same
    ``fields`` (:data:`REFERENCE_FIELDS`; the headline comparison, where each engine keeps its own
    best batch size, leaves ``batch_size`` out: :data:`DEPTH_FIELDS`), and whether and when the
    run's evaluations reached it (:func:`gnnrec_lab.training.loop.target_outcome` over its history: training
    seconds, evaluation excluded, on both engines). ``{}`` where no such full-graph run is among them."""
    def key(res):
        cfg = res.get("config") or {}
        return tuple(cfg.get(f) for f in fields)
    best: dict = {}
    for rid, res in results:
        v = (res.get("best_valid") or {}).get("recall@20")
        if engine_of(res) == "full" and v is not None and np.isfinite(v) and v > best.get(key(res), (None, -1))[1]:
            best[key(res)] = (rid, float(v))
    out = []
    for _, res in results:
        if key(res) not in best:
            out.append({})
            continue
        rid, ref = best[key(res)]
        out.append(target_outcome(res.get("history") or [], fraction * ref, "recall@20", of_run=rid,
                                  fraction=fraction, reference=ref))
    return out


def comparison_frame(store=None, run_ids=None, results=(), target_fraction: float = TARGET_FRACTION):
    """Finished runs, full-graph and DistDGL side by side (one row per run, all measured):
    ``engine`` (``full``, ``sampled`` or ``distdgl``), mean epoch seconds, time to the run's own
    Recall@20 target, best validation and test Recall@20, the neighbourhood-explosion factor (input
    nodes per batch / graph nodes; 1 for full-graph training, which propagates every node every
    step) and DistDGL's median batch time; and the common target (:func:`common_targets`):
    ``target_fraction`` of the best full-graph run's validation Recall@20 at the same depth and
    batch size (``reference_run``), reached or not, and the training seconds to it. Rows come from
    ``store`` (``run_ids`` or every finished run) and from ``results`` (result dicts not in a store)."""
    import pandas as pd
    pairs = [(None, r) for r in results]
    if store is not None:
        for rid in (store.run_ids(RunStatus.FINISHED) if run_ids is None else list(run_ids)):
            res = store.get_run(rid).get("result")
            if res:
                pairs.append((rid, res))
    rows = []
    for (rid, res), t in zip(pairs, common_targets(pairs, target_fraction)):
        row = comparison_row(res, rid)
        if t:
            row.update(reference_run=t["of_run"], common_target=t["value"], common_target_reached=t["reached"],
                       time_to_common_target_s=t["time_s"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def run(spec: DistSpec, dataset, method: str = "metis", store=None, config=None, progress=print) -> dict:
    """Partition, launch, wait, summarise; records the run when ``store``/``config`` are given."""
    from gnnrec_lab.training.loop import _eval_users
    require_dgl()
    Path(spec.workdir).mkdir(parents=True, exist_ok=True)
    part = partition(dataset, spec, method)
    progress(f"partitioned {dataset.name} into {spec.partitions} ({method}) in {part['partition_seconds']:.2f} s "
             f"(measured); nodes per partition {part['nodes_per_partition']}")
    ports = free_ports(spec.partitions + 1)
    spec.ports, spec.master_port = ports[:-1], ports[-1]
    with contextlib.ExitStack() as stack:
        cluster = None
        if spec.cluster == "emulated":
            cluster = stack.enter_context(EmulatedCluster(spec.partitions, spec.cores_per_machine, spec.link_gbit))
            spec.ip_config = str(spec.path("ip_config.txt"))
            Path(spec.ip_config).write_text(cluster.ip_config())
            progress(f"emulated cluster {cluster.prefix}: " + ", ".join(
                f"machine {m.index} {m.address} cores {m.cores}" for m in cluster.machines)
                + (f", links {spec.link_gbit:g} Gbit/s (tbf)" if spec.link_gbit > 0 else ", links unshaped"))
        elif not spec.ip_config:
            spec.ip_config = str(spec.path("ip_config.txt"))
            Path(spec.ip_config).write_text("".join(f"127.0.0.1 {p}\n" for p in spec.ports))
        spec.save()
        info = {"engine": ENGINE, "partitions": spec.partitions, "fanouts": list(spec.fanouts), **part,
                "isolated_shm": spec.isolate, "ip_config": Path(spec.ip_config).read_text().splitlines(),
                "cluster": cluster.describe() if cluster is not None else
                {"kind": "local" if all(is_local(h) for h in ip_hosts(spec)) else "hosts",
                 "machines": [{"index": i, "address": h} for i, h in enumerate(ip_hosts(spec))]}}
        users = _eval_users(spec.run_config(), dataset)
        if store is not None:
            store.record_start(spec.run_id, {"host": host_info(), "engine": ENGINE, "distributed": info,
                                             "eval_users": "all" if users is None else
                                             f"sample of {len(users):,} (seeded, as a full-graph run's)",
                                             "dataset": {"users": dataset.n_users, "items": dataset.n_items,
                                                         "train": int(len(dataset.train))}})
        t0 = time.perf_counter()
        before = cluster.link_bytes() if cluster is not None else None
        reports = launch(spec, cluster=cluster)
        wall = time.perf_counter() - t0
        links = None
        if cluster is not None:   # read before the teardown deletes the interfaces
            links = [{"machine": a["machine"], "address": cluster.machines[a["machine"]].address,
                      "tx_bytes": _delta(a["tx_bytes"], b["tx_bytes"]),
                      "rx_bytes": _delta(a["rx_bytes"], b["rx_bytes"])}
                     for a, b in zip(before, cluster.link_bytes())]
    result = run_result(reports, info, wall, links, config)
    if store is not None:
        store.record_result(spec.run_id, result)
    return result


def _delta(before, after):
    return None if before is None or after is None else after - before


def _main(argv) -> int:
    role, spec_path, index = argv[0], argv[1], int(argv[2])
    fn = {"machine": machine_main, "server": server_main, "trainer": trainer_main}[role]
    return int(fn(spec_path, index) or 0)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
