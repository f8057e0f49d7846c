"""One trainer of a run (``python -m gnnrec_lab.distributed.engine trainer SPEC I``): joins DGL's
servers and the other trainers, checks every row it fetches against the source
(:func:`check_rows`), then trains its partition's users through the lab's loop with a
:class:`~gnnrec_lab.distributed.step.DistDGLStep` and writes its report (``trainer<i>.json``;
trainer 0's carries the run's result)."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from gnnrec_lab import data
from gnnrec_lab.distributed.network import ip_hosts
from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.distributed.step import DistDGLStep
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.models import build_model  # loads no torch (gnnrec_lab.models.registry)
from gnnrec_lab.runs.store import Store, StoreReporter
from gnnrec_lab.training.reporting import Reporter
from gnnrec_lab.util.files import write_atomic
from gnnrec_lab.util.proc import load_sample


def check_rows(g, orig_nids: np.ndarray, chunk: int = 1 << 16) -> dict:
    """Fetch every node's ``orig_id`` through the distributed store and compare it with the
    partitioner's id map (the source). Returns ``{"rows_checked", "rows_wrong", "local_wrong",
    "remote_wrong"}``; a shared /dev/shm shows up as wrong rows here."""
    import torch
    n = g.num_nodes()
    pb = g.get_partition_book()
    wrong = local_wrong = 0
    for s in range(0, n, chunk):
        ids = torch.arange(s, min(n, s + chunk), dtype=torch.int64)
        try:
            got = g.ndata["orig_id"][ids].numpy()
        except Exception as e:   # DGL refuses a local id past the (wrong) mapped partition's end
            got = np.full(len(ids), -1, dtype=np.int64)
            print(f"row check: fetching rows {s}..{s + len(ids) - 1} failed: {str(e).splitlines()[0]}",
                  file=sys.stderr)
        bad = got != orig_nids[s:s + len(ids)]
        wrong += int(bad.sum())
        local_wrong += int((bad & (pb.nid2partid(ids).numpy() == pb.partid)).sum())
    return {"rows_checked": int(n), "rows_wrong": wrong, "local_wrong": local_wrong,
            "remote_wrong": wrong - local_wrong}


def init_embedding(shape, dtype):
    """Layer-0 rows as the lab's models start them: normal, std 0.1 (run by the servers, so a
    module-level function DGL can pickle)."""
    import torch
    return (torch.randn(shape) * 0.1).to(dtype)


def trainer_main(spec_path: str, index: int) -> int:
    """Run one trainer; on any failure print the traceback and leave at once (``os._exit``):
    DGL's exit hook would otherwise wait for the other trainers, which wait in a collective."""
    try:
        rc = _trainer(spec_path, index)
    except BaseException:
        import traceback
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if rc:
        os._exit(rc)
    return rc


def _trainer(spec_path: str, index: int) -> int:
    import torch
    import torch.distributed as tdist
    spec = DistSpec.load(spec_path)
    import dgl
    from dgl.distributed import rpc_client
    t_start = time.perf_counter()
    hosts = ip_hosts(spec)
    if len(set(hosts)) < len(hosts):
        # machines share an address (every one 127.0.0.1 on --cluster local): DGL finds its machine
        # by matching its own addresses against ip_config and would take each trainer for machine 0.
        # With one host per machine (real hosts, the emulated cluster) DGL's own lookup is used.
        rpc_client.get_local_machine_id = lambda _namebook: index
    dgl.distributed.initialize(spec.ip_config)
    tdist.init_process_group("gloo")
    g = dgl.distributed.DistGraph(spec.graph_name)
    orig_nids = np.load(spec.path("orig_nids.npy"))
    new_of_orig = np.empty_like(orig_nids)
    new_of_orig[orig_nids] = np.arange(orig_nids.shape[0])
    startup_s = time.perf_counter() - t_start
    check = check_rows(g, orig_nids)
    report = {"index": index, "startup_seconds": startup_s, "check": check,
              "cores": sorted(os.sched_getaffinity(0)), "gloo_interface": os.environ.get("GLOO_SOCKET_IFNAME")}
    wrong = torch.tensor([check["rows_wrong"]], dtype=torch.int64)
    tdist.all_reduce(wrong)            # every trainer stops when any saw wrong rows
    if int(wrong):
        report["error"] = (f"trainer {index}: {check['rows_wrong']:,} of {check['rows_checked']:,} fetched rows "
                           f"differ from the source ({int(wrong):,} over all trainers; shared /dev/shm between "
                           f"machines?)")
        write_atomic(spec.path(f"trainer{index}.json"), json.dumps(report))
        print(report["error"], file=sys.stderr)
        return 3
    try:
        if os.environ.get("GNNREC_LAB_DIST_PROFILE"):   # a cProfile of the training loop per trainer
            import cProfile
            prof = cProfile.Profile()
            report.update(prof.runcall(_train, spec, index, g, orig_nids, new_of_orig))
            prof.dump_stats(str(spec.path(f"trainer{index}.prof")))
        else:
            report.update(_train(spec, index, g, orig_nids, new_of_orig))
    finally:
        import resource
        report["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        write_atomic(spec.path(f"trainer{index}.json"), json.dumps(report, default=float))
    tdist.barrier()
    return 0   # DGL's atexit hook shuts the servers down


class _TrainerReporter(StoreReporter):
    """Trainer 0's reporter: steps, epochs, evaluations, events and load go to the store as the
    loop reports them; the launcher records the run's start and its whole result (every trainer's
    report folded in)."""

    def on_start(self, config, info) -> None:
        pass

    def on_finish(self, result) -> None:
        pass


def _train(spec: DistSpec, index: int, g, orig_nids, new_of_orig) -> dict:
    """Set up this trainer's part of the run and train it through the lab's loop
    (:func:`gnnrec_lab.training.loop.run_loop` with a :class:`DistDGLStep`); its report (trainer 0's
    carries the run's result)."""
    import dgl
    import torch
    import torch.distributed as tdist

    from gnnrec_lab import kernels
    from gnnrec_lab.training.loop import EarlyStopping, RunResult, TrainingRun, _eval_users, run_loop, steps_per_epoch


    torch.manual_seed(spec.seed)
    config = spec.run_config()
    kernels.set_backend(config.backend)
    dataset = data.load(spec.dataset, seed=spec.seed, data_dir=spec.data_dir)
    n_users, n_items = dataset.n_users, dataset.n_items
    n_nodes = n_users + n_items
    pb = g.get_partition_book()
    me = pb.partid
    # this trainer's interactions: those of the users its partition owns (negatives are then
    # rejected against every positive of those users, as the single-process batches do)
    owner = pb.nid2partid(torch.from_numpy(new_of_orig[:n_users])).numpy()
    mine = dataset.train[owner[dataset.train[:, 0]] == me]
    if len(mine) == 0:
        raise RuntimeError(f"partition {me} owns no user with training interactions; use fewer partitions")
    local = BipartiteGraph(mine, n_users, n_items)
    steps = steps_per_epoch(config, len(dataset.train))   # global batches per epoch, as train.py counts
    model = build_model(config, n_users, n_items)
    dense = [p for n, p in model.named_parameters() if n != "embedding"]
    model.embedding.requires_grad_(False)
    emb = dgl.distributed.DistEmbedding(n_nodes, spec.dim, name=f"{spec.graph_name}_emb", init_func=init_embedding)
    sparse_opt = dgl.distributed.optim.SparseAdam([emb], lr=spec.lr)
    dense_opt = torch.optim.Adam(dense, lr=spec.lr) if dense else None
    for p in dense:   # the same start everywhere
        tdist.broadcast(p.data, 0)
    leader = index == 0
    # trainer 0 evaluates on the full graph (the lab's evaluation, the same seeded users as a
    # full-graph run of the same seed: train.py's own sample)
    graph = BipartiteGraph(dataset.train, n_users, n_items) if leader else None
    run = TrainingRun(config, dataset, graph, model, dense_opt, None, steps, steps * config.epochs,
                      _eval_users(config, dataset), RunResult(config=config),
                      stopper=EarlyStopping(config.patience), target_about=spec.target_about())
    run.load["start"] = load_sample()
    store = Store(spec.home) if leader and spec.run_id is not None else None
    rep = _TrainerReporter(store, spec.run_id) if store is not None else Reporter()
    step = DistDGLStep(spec, index, g, local, new_of_orig, orig_nids, model, emb, sparse_opt, dense_opt)
    try:
        result = run_loop(run, rep, step)
    finally:
        if store is not None:
            store.close()
    dense_lr = dense_opt.param_groups[0]["lr"] if dense_opt is not None else None
    out = {"lr": {"first": step.lrs[0] if step.lrs else None, "max": max(step.lrs, default=None),
                  "last_sparse": sparse_opt._lr, "last_dense": dense_lr, "steps": len(step.lrs)},
           "batches": step.batches_done, "epoch_seconds": result.epoch_seconds,
           "train_seconds": result.train_seconds, "steps": result.steps, "steps_per_epoch": steps,
           "per_trainer_batch": step.per_batch, "local_interactions": int(len(mine)), "n_nodes": n_nodes,
           "row_bytes": spec.dim * 4}
    if leader:
        out["result"] = result.to_dict()
    return out
