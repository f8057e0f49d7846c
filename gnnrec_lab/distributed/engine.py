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

from gnnrec_lab.distributed.cluster import EmulatedCluster
from gnnrec_lab.distributed.lane import require_dgl
from gnnrec_lab.distributed.launch import launch
from gnnrec_lab.distributed.machine import machine_main, server_main
from gnnrec_lab.distributed.network import free_ports, ip_hosts, is_local
from gnnrec_lab.distributed.partition import partition
from gnnrec_lab.distributed.results import ENGINE, run_result
from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.distributed.trainer import trainer_main
from gnnrec_lab.util.proc import host_info


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
