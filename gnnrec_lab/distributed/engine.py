"""DistDGL as the distributed baseline: sampled mini-batch training on a partitioned graph.

The paper the lab follows compares full-graph training on one big-memory machine against
DistDGL. This module runs that baseline with the lab's own pieces wherever DGL is not the
point: the lab's models (``propagate_blocks`` over the sampled blocks, the lab's kernels), the
lab's BPR batches and negatives, the lab's full-ranking evaluation, the lab's run store.
DGL provides the partitioning (METIS), the servers, the distributed neighbour sampling, the
distributed embedding table (``DistEmbedding``) and its ``SparseAdam``.

Layout of one run (``P`` partitions = ``P`` "machines", each one server + one trainer)::

    Runner                         the Launch page's or ``gnnrec-lab distributed``'s: queues the
                                   run (:func:`runner_request`), watches it, cancels it
    └─ worker                      ``python -m gnnrec_lab.runs.worker RUN_ID`` in its own session
                                   (:func:`train`, :func:`run`): partitions, writes ip_config +
                                   spec, launches the machines, records
         └─ machine i (P of them)  ``unshare -m``: private mount namespace, tmpfs on /dev/shm
              ├─ server i          DGL_ROLE=server, serves partition i
              └─ trainer i         DGL_ROLE=client, torch.distributed rank i (gloo)

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
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

from gnnrec_lab import data
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.distributed.cluster import EmulatedCluster, check_possible
from gnnrec_lab.distributed.lane import DGL_MISSING, dgl_available, dgl_lane_python, require_dgl
from gnnrec_lab.distributed.launch import ENTRY, check_isolation, launch
from gnnrec_lab.distributed.machine import machine_main, server_main
from gnnrec_lab.distributed.network import check_ip_config, free_ports, ip_hosts, is_local
from gnnrec_lab.distributed.partition import GRAPH_PREFIX, partition
from gnnrec_lab.distributed.results import ENGINE, run_result
from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.distributed.trainer import trainer_main
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.proc import host_info

# what a run the Runner starts names to be a DistDGL run (its request's train_fn: runner_request)
TRAIN_FN = f"{ENTRY}:train"


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
        reports = launch(spec, cluster=cluster, progress=progress)
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


def run_folder(store, run_id: int) -> tuple[Path, str]:
    """Stored run ``run_id``'s work folder (partitions, spec.json, logs, created) and DGL's name of
    its graph (unique on this host: the run's id and the folder's inode)."""
    workdir = store.run_dir(run_id) / "distdgl"
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir, f"{GRAPH_PREFIX}{run_id}_{workdir.stat().st_ino}"


def drop_partitions(workdir: Path) -> None:
    """Remove a finished run's partition files and best embeddings from its work folder."""
    shutil.rmtree(Path(workdir) / "parts", ignore_errors=True)
    (Path(workdir) / "best_emb.npy").unlink(missing_ok=True)


# -- a DistDGL run through the Runner (queued, watched and cancelled as a full-graph run is) -----
def runner_request(config: RunConfig, partitions: int = 2, *, cluster: str = "local", cores_per_machine: int = 1,
                   link_gbit: float = 10.0, timeout_s: float = 3600.0, part_method: str = "metis",
                   ip_config: str = "", isolate: bool = True, keep_partitions: bool = False,
                   target_of: Optional[int] = None, target_fraction: Optional[float] = None,
                   target_reference: Optional[float] = None) -> dict:
    """:meth:`Runner.launch <gnnrec_lab.runs.runner.Runner.launch>`'s keyword arguments for a DistDGL
    run of ``config`` (sampled mode) on ``partitions`` machines: ``Runner(store).launch(config,
    **runner_request(config, 2))``; the Launch page and ``gnnrec-lab distributed`` both launch so.
    The cluster's fields (``cluster`` ... ``timeout_s``, ``ip_config``: a file of one ``HOST PORT``
    line per machine, empty for this host; ``isolate``: a private /dev/shm per machine; ``target_*``:
    where ``config.target_recall`` came from, see :class:`DistSpec`) are the spec's; ``part_method``
    (metis or random) is DGL's partitioner, ``keep_partitions`` keeps the partition files in the run
    folder. Checked now, before anything is queued: the spec :meth:`DistSpec.of` makes, the private
    /dev/shm, the dataset's name, the ip_config file, the emulated cluster's tools and cores. The
    worker runs in this interpreter where DGL imports here, else in the DGL lane's (``make dgl``);
    UserError naming ``make dgl`` where neither has DGL."""
    if part_method not in ("metis", "random"):
        raise ConfigError("part_method", f"got {part_method!r}, allowed: metis, random")
    if not isinstance(keep_partitions, bool):
        raise ConfigError("keep_partitions", f"True or False, got {keep_partitions!r}")
    options = dict(partitions=partitions, cluster=cluster, cores_per_machine=cores_per_machine, link_gbit=link_gbit,
                   timeout_s=timeout_s, ip_config=ip_config, isolate=isolate, target_of=target_of,
                   target_fraction=target_fraction, target_reference=target_reference)
    check_isolation(DistSpec.of(config, ".", "pending", **options).isolate)
    data.describe(config.dataset, data_dir=config.data_dir)   # an unknown dataset: DataError naming it
    if ip_config:
        check_ip_config(ip_config, partitions)
    if cluster == "emulated":
        if ip_config:
            raise ConfigError("ip_config", "not with cluster emulated, which makes its own (one address per machine)")
        if not isolate:
            raise ConfigError("isolate", "a shared /dev/shm only with cluster local")
        check_possible(partitions, cores_per_machine, link_gbit)
    if dgl_available():
        python = sys.executable
    else:
        lane = dgl_lane_python()
        if lane is None:
            raise UserError(DGL_MISSING)
        python = str(lane)
    return {"train_fn": TRAIN_FN, "options": {**options, "part_method": part_method,
                                              "keep_partitions": keep_partitions}, "python": python}


def train(config: RunConfig, reporter=None, progress: bool = False, *, partitions: int = 2, cluster: str = "local",
          cores_per_machine: int = 1, link_gbit: float = 10.0, timeout_s: float = 3600.0,
          part_method: str = "metis", ip_config: str = "", isolate: bool = True, keep_partitions: bool = False,
          target_of: Optional[int] = None, target_fraction: Optional[float] = None,
          target_reference: Optional[float] = None) -> dict:
    """A DistDGL run of ``config`` as the Runner's worker trains it (:func:`runner_request` names
    it and its keyword arguments): ``reporter`` is the run's
    :class:`~gnnrec_lab.runs.store.StoreReporter`; the run is partitioned, launched and recorded in
    its store (:func:`run`), and its result (a dict, already recorded) returned. Each step's line
    (partitioned, the cluster) is a run event and a line on stderr (the worker's log). The partition
    files are removed at the end unless ``keep_partitions``. UserError without DGL, and
    :class:`~gnnrec_lab.distributed.launch.MachineFailed` (its message the run's error) when a machine
    fails or the run times out."""
    require_dgl()
    store, run_id = reporter.store, reporter.run_id
    workdir, graph_name = run_folder(store, run_id)
    spec = DistSpec.of(config, str(workdir), graph_name, partitions, run_id=run_id, home=str(store.home),
                       cluster=cluster, cores_per_machine=cores_per_machine, link_gbit=link_gbit, timeout_s=timeout_s,
                       ip_config=ip_config, isolate=isolate, target_of=target_of, target_fraction=target_fraction,
                       target_reference=target_reference)
    if cluster == "emulated":
        check_possible(partitions, cores_per_machine, link_gbit)

    def say(line: str) -> None:
        reporter.on_event(ENGINE, line)
        print(line, file=sys.stderr, flush=True)
    dataset = data.load(config.dataset, seed=config.seed, data_dir=config.data_dir)
    try:
        result = run(spec, dataset, method=part_method, store=store, config=config, progress=say)
    finally:
        if not keep_partitions:
            drop_partitions(workdir)
    reporter.recorded = True   # run() recorded it: the worker does not write it again
    return result


def _delta(before, after):
    return None if before is None or after is None else after - before


def _main(argv) -> int:
    role, spec_path, index = argv[0], argv[1], int(argv[2])
    fn = {"machine": machine_main, "server": server_main, "trainer": trainer_main}[role]
    return int(fn(spec_path, index) or 0)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
