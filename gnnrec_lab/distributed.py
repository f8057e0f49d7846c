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
(:func:`check_rows`); a run with wrong rows fails.

Per mini-batch each trainer times (measured, perf_counter): ``sampling`` (BPR triples, the
distributed neighbour sampling, block construction), ``remote_fetch`` (layer-0 embedding rows and
degrees of the input nodes), ``compute`` (forward, loss, backward with the lab's kernels),
``grad_sync`` (dense gradients all-reduced, ``SparseAdam``'s all-to-all of row gradients and the
update). Bytes between partitions are *counted*: rows (and sampled edges) owned by another
partition times their size in bytes.

``--ip-config`` with one ``HOST PORT`` line per machine runs the same trainers across real
machines (each machine then runs ``python -m gnnrec_lab.distributed machine SPEC I`` itself, with
the partition folder at the same path); the single-host path is the tested one.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from . import data
from .cluster import EmulatedCluster
from .config import RunConfig
from .distspec import DistSpec
from .errors import UserError
from .graph import CSR, BipartiteGraph
from .proc import host_info
from .provenance import Provenance
from .status import RunStatus
from .store import Store

ENGINE = "distdgl"
GRAPH_PREFIX = "gnnrec"
PHASES = ("sampling", "remote_fetch", "compute", "grad_sync")
SHM_SIZE = "4g"                 # the tmpfs each machine's /dev/shm gets (allocated on use only)
PRIVATE_SHM_ENV = "GNNREC_LAB_PRIVATE_SHM"   # set by the launcher on machines it put in `unshare -m`


def dgl_available() -> bool:
    from .kernels import _dgl_importable
    return _dgl_importable()


def require_dgl() -> None:
    if not dgl_available():
        raise UserError("distributed: needs DGL, which is not importable here (DGL 2.1 needs torch <= 2.2.1); "
                        "build the DGL lane with `make dgl` and run `.venv-dgl/bin/gnnrec-lab distributed ...`")


# -- partitioning --------------------------------------------------------------------------------
def build_dgl_graph(dataset):
    """The lab's training graph as a homogeneous DGL graph: users ``0..n_users-1``, items after
    them, each interaction as two directed edges; node data ``deg`` (full-graph degree) and
    ``orig_id`` (the lab's node id, kept to check fetched rows against the source)."""
    import dgl
    import torch
    u = torch.from_numpy(dataset.train[:, 0].astype(np.int64))
    i = torch.from_numpy(dataset.train[:, 1].astype(np.int64)) + dataset.n_users
    n = dataset.n_users + dataset.n_items
    g = dgl.graph((torch.cat([u, i]), torch.cat([i, u])), num_nodes=n)
    g.ndata["deg"] = g.in_degrees().to(torch.float32)
    g.ndata["orig_id"] = torch.arange(n, dtype=torch.int64)
    return g


def partition(dataset, spec: DistSpec, method: str = "metis") -> dict:
    """Partition with DGL's partitioner into ``spec.workdir``; saves the new->lab node id map.
    Returns timing and partition sizes (measured)."""
    import dgl
    import torch
    g = build_dgl_graph(dataset)
    t0 = time.perf_counter()
    with open(spec.path("partition.log"), "w") as log, contextlib.redirect_stdout(log):
        orig_nids, _ = dgl.distributed.partition_graph(
            g, spec.graph_name, spec.partitions, str(spec.path("parts")), part_method=method,
            balance_edges=True, return_mapping=True)
    dt = time.perf_counter() - t0
    np.save(spec.path("orig_nids.npy"), orig_nids.numpy().astype(np.int64))
    conf = json.loads(spec.path(f"parts/{spec.graph_name}.json").read_text())
    bounds = conf["node_map"]["_N"]
    sizes = [int(b[1] - b[0]) for b in bounds]
    del torch
    return {"partition_seconds": dt, "partition_method": method, "nodes_per_partition": sizes,
            "edges": int(g.num_edges())}


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _env(spec: DistSpec, index: int, role: str) -> dict:
    env = dict(os.environ)
    env.update({
        "DGLBACKEND": "pytorch", "DGL_ROLE": role, "DGL_SERVER_ID": str(index), "DGL_NUM_SERVER": "1",
        "DGL_NUM_CLIENT": str(spec.partitions), "DGL_NUM_SAMPLER": "0", "DGL_IP_CONFIG": spec.ip_config,
        "DGL_CONF_PATH": str(spec.path(f"parts/{spec.graph_name}.json")), "DGL_DIST_MODE": "distributed",
        "DGL_GRAPH_FORMAT": "csc", "MASTER_ADDR": ip_hosts(spec)[0], "MASTER_PORT": str(spec.master_port),
        "RANK": str(index), "WORLD_SIZE": str(spec.partitions), "OMP_NUM_THREADS": "1",
    })
    return env


# -- the launcher (CLI process) ------------------------------------------------------------------
def launch(spec: DistSpec, timeout_s: Optional[float] = None, cluster=None) -> list[dict]:
    """Start every machine (server + trainer in a private mount namespace; in ``cluster``'s
    network namespace on its cores when given) and wait for the trainers; returns each trainer's
    report (``trainer<i>.json``). Raises RuntimeError with the failing process's log tail when one
    fails; the machines are stopped however this returns (also on KeyboardInterrupt/SystemExit)."""
    if spec.isolate and shutil.which("unshare") is None:
        raise UserError("distributed: `unshare` (util-linux) is needed to give each machine a private /dev/shm")
    if spec.isolate and os.geteuid() != 0:
        raise UserError("distributed: a private /dev/shm per machine needs root (unshare -m + mount)")
    shm_before = _shm_names()
    try:
        return _launch(spec, spec.timeout_s if timeout_s is None else timeout_s, cluster)
    finally:
        if not spec.isolate:   # servers killed on a shared /dev/shm leave their segments there
            for name in _shm_names() - shm_before:
                if name.startswith(spec.graph_name) or name.endswith("-kvdata-"):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join("/dev/shm", name))


def _shm_names() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def ip_hosts(spec: DistSpec) -> list[str]:
    """The host of each machine, in ip_config order."""
    return [ln.split()[0] for ln in Path(spec.ip_config).read_text().splitlines() if ln.strip()]


def _is_local(host: str) -> bool:
    if host in ("localhost", "::1") or host.startswith("127."):
        return True
    try:
        name = socket.gethostname()
        return host in {name, *socket.gethostbyname_ex(name)[2]}
    except OSError:
        return False


def _launch(spec: DistSpec, timeout_s: float, cluster=None) -> list[dict]:
    """Start the machines whose ip_config host is this one (every one of an emulated ``cluster``);
    the others must be started on their hosts (``python -m gnnrec_lab.distributed machine SPEC I``,
    the work folder shared at the same path); done when every local machine exited 0 and every
    trainer's report is there."""
    procs: dict = {}
    for i, host in enumerate(ip_hosts(spec)):
        if cluster is None and not _is_local(host):
            print(f"machine {i} is {host}: start it there with `GLOO_SOCKET_IFNAME=<its interface on "
                  f"{host}'s network> taskset -c <its cores> .venv-dgl/bin/python -m gnnrec_lab.distributed machine "
                  f"{spec.path('spec.json')} {i}` (docs/dgl.md)", file=sys.stderr)
            continue
        cmd = [sys.executable, "-m", "gnnrec_lab.distributed", "machine", str(spec.path("spec.json")), str(i)]
        if spec.isolate:
            cmd = ["unshare", "-m", "--propagation", "private", "--"] + cmd
        # the machine mounts its own /dev/shm only when it is sure to be in a mount namespace of its
        # own; a machine started by hand on a real host has the host's /dev/shm to itself already
        env = {**os.environ, PRIVATE_SHM_ENV: "1"} if spec.isolate else dict(os.environ)
        if cluster is not None:   # exactly a real host's command, in the machine's netns on its cores
            cmd = cluster.command(i, cmd)
            env.update(cluster.env(i))
        log = open(spec.path(f"machine{i}.log"), "wb")
        procs[i] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env),
                    log)
    remote = [i for i in range(spec.partitions) if i not in procs]
    deadline = time.monotonic() + timeout_s
    failed = None
    try:
        while True:
            codes = {i: p.poll() for i, (p, _) in procs.items()}
            bad = [i for i, c in codes.items() if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes.values()) and all(spec.path(f"trainer{i}.json").exists() for i in remote):
                break
            if time.monotonic() > deadline:
                failed = -1
                break
            time.sleep(0.2)
    except BaseException:       # Ctrl-C, SIGTERM (SystemExit): stop the machines before leaving
        failed = -2
        raise
    finally:
        if failed is not None:
            for p, _ in procs.values():
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGTERM)
            for p, _ in procs.values():
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for _, log in procs.values():
            log.close()
    if failed is not None:
        which = "timed out" if failed == -1 else f"machine {failed} exited with {procs[failed][0].returncode}"
        tails = "\n".join(f"--- machine{i}.log ---\n" + _tail(spec.path(f"machine{i}.log")) for i in procs)
        raise RuntimeError(f"distributed run failed: {which}\n{tails}")
    return [json.loads(spec.path(f"trainer{i}.json").read_text()) for i in range(spec.partitions)]


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


# -- one machine: server + trainer ---------------------------------------------------------------
def machine_main(spec_path: str, index: int) -> int:
    spec = DistSpec.load(spec_path)
    if spec.isolate and os.environ.get(PRIVATE_SHM_ENV) == "1":
        # a private tmpfs on /dev/shm: this machine's server and trainer share it, no other does
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SHM_SIZE}", "tmpfs", "/dev/shm"], check=True)
    logs = []

    def start(role):
        log = open(spec.path(f"{role}{index}.log"), "wb")
        logs.append(log)
        return subprocess.Popen([sys.executable, "-m", "gnnrec_lab.distributed", role, spec_path, str(index)],
                                env=_env(spec, index, "server" if role == "server" else "client"),
                                stdout=log, stderr=subprocess.STDOUT)
    server = start("server")
    trainer = start("trainer")
    try:
        while trainer.poll() is None:
            if server.poll() not in (None, 0):
                trainer.kill()
                trainer.wait()
                print(f"server {index} exited with {server.returncode}:\n" + _tail(spec.path(f"server{index}.log")))
                return 1
            time.sleep(0.2)
        rc = trainer.returncode
        try:
            server.wait(30 if rc == 0 else 1)   # servers stop when the trainers are done
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if rc != 0:
            print(f"trainer {index} exited with {rc}:\n" + _tail(spec.path(f"trainer{index}.log")))
        return rc
    finally:
        for p in (server, trainer):
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def server_main(spec_path: str, index: int) -> int:
    spec = DistSpec.load(spec_path)
    import dgl
    dgl.distributed.initialize(spec.ip_config)   # serves until the trainers shut it down
    return 0


# -- the trainer ---------------------------------------------------------------------------------
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


def _block_csr(block, deg_src):
    """A DGL block (dst nodes a prefix of its src nodes) as the lab's CSR with the sampled
    LightGCN weights of :func:`gnnrec_lab.sampling.sample_subgraph`:
    ``d_dst^-1/2 d_src^-1/2 d_dst / k_dst`` (full-graph degrees, ``k`` sampled neighbours)."""
    indptr, indices, _ = block.adj_tensors("csc")
    indptr = indptr.numpy().astype(np.int64)
    n_dst, n_src = block.num_dst_nodes(), block.num_src_nodes()
    scale = np.where(deg_src > 0, 1.0 / np.sqrt(np.maximum(deg_src, 1)), 0.0).astype(np.float32)
    k = np.maximum(np.diff(indptr), 1).astype(np.float32)
    row_scale = scale[:n_dst] * (deg_src[:n_dst] / k)
    return CSR(indptr, indices.numpy().astype(np.int32), n_dst, n_src, None, row_scale.astype(np.float32), scale)


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
    spec = DistSpec.load(spec_path)
    import dgl
    import torch
    import torch.distributed as tdist
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
        spec.path(f"trainer{index}.json").write_text(json.dumps(report))
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
        spec.path(f"trainer{index}.json").write_text(json.dumps(report, default=float))
    tdist.barrier()
    return 0   # DGL's atexit hook shuts the servers down


def _train(spec: DistSpec, index: int, g, orig_nids, new_of_orig) -> dict:
    import dgl
    import torch
    import torch.distributed as tdist

    from . import kernels
    from .evaluate import evaluate
    from .models import build_model
    from .models.loss import bpr_loss_rows
    from .sampling import bpr_batches

    W = spec.partitions
    torch.manual_seed(spec.seed)
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
    per_batch = max(1, spec.batch_size // W)
    steps = -(-len(dataset.train) // spec.batch_size)
    if spec.max_steps_per_epoch:
        steps = min(steps, spec.max_steps_per_epoch)
    cfg = RunConfig(dataset=spec.dataset, model=spec.model, layers=spec.layers, dim=spec.dim,
                    batch_size=spec.batch_size, mode="sampled", fanouts=tuple(spec.fanouts), ngcf_form=spec.ngcf_form)
    model = build_model(cfg, n_users, n_items)
    dense = [p for n, p in model.named_parameters() if n != "embedding"]
    model.embedding.requires_grad_(False)
    emb = dgl.distributed.DistEmbedding(n_nodes, spec.dim, name=f"{spec.graph_name}_emb", init_func=init_embedding)
    sparse_opt = dgl.distributed.optim.SparseAdam([emb], lr=spec.lr)
    dense_opt = torch.optim.Adam(dense, lr=spec.lr) if dense else None
    for p in dense:   # the same start everywhere
        tdist.broadcast(p.data, 0)
    rng = np.random.default_rng(spec.seed + 1000 * index)
    row_bytes = spec.dim * 4
    store = None
    if index == 0 and spec.run_id is not None:
        store = Store(spec.home)
    eval_users = None
    if spec.eval_users is not None and spec.eval_users < n_users:
        eval_users = np.sort(np.random.default_rng(spec.seed + 1).choice(n_users, spec.eval_users, replace=False))
    full_graph = BipartiteGraph(dataset.train, n_users, n_items) if index == 0 else None

    batches = []          # per mini-batch: phase seconds, total, counts
    history, epoch_seconds = [], []
    best, best_epoch, t_target = {}, -1, None
    # train.py's early stopping and best-epoch rule (ties are not a new best); trainer 0 decides
    from .train import EarlyStopping
    stopper = EarlyStopping(spec.patience)
    t_train = 0.0
    step = 0

    def triples():
        while True:
            yield from bpr_batches(local, per_batch, rng)

    it = triples()
    # epochs and steps counted from 1, as train.py counts them (the store, Compare and the
    # notebooks put both engines' curves on one axis)
    for epoch in range(1, spec.epochs + 1):
        print(f"trainer {index}: epoch {epoch} of {spec.epochs}", flush=True)   # progress, in its log
        t_epoch = time.perf_counter()
        loss_sum = 0.0
        for _ in range(steps):
            t0 = time.perf_counter()
            users, pos, neg = next(it)
            orig = np.concatenate([users, pos + n_users, neg + n_users])
            seeds_all = new_of_orig[orig]
            seeds, inv = np.unique(seeds_all, return_inverse=True)
            blocks, remote_edges = [], 0
            frontier_nodes = torch.from_numpy(seeds)
            for fan in spec.fanouts:
                fr = dgl.distributed.sample_neighbors(g, frontier_nodes, int(fan))
                dst = fr.edges()[1]
                remote_edges += int((pb.nid2partid(dst) != me).sum())
                blk = dgl.to_block(fr, frontier_nodes)
                blocks.append(blk)
                frontier_nodes = blk.srcdata[dgl.NID]
            t1 = time.perf_counter()
            input_nodes = frontier_nodes
            deg = g.ndata["deg"][input_nodes].numpy()
            x = emb(input_nodes)
            remote_rows = int((pb.nid2partid(input_nodes) != me).sum())
            t2 = time.perf_counter()
            csrs = [_block_csr(b, deg[:b.num_src_nodes()]) for b in blocks]
            x = x.contiguous()
            out = model.propagate_blocks(csrs, x)
            n_b = len(users)
            u_rows = torch.from_numpy(inv[:n_b].astype(np.int64))
            p_rows = torch.from_numpy(inv[n_b:2 * n_b].astype(np.int64))
            n_rows = torch.from_numpy(inv[2 * n_b:].astype(np.int64))
            loss, _ = bpr_loss_rows(out, x, u_rows, p_rows, n_rows, spec.l2)
            if dense_opt is not None:
                dense_opt.zero_grad(set_to_none=True)
            # DGL's sparse optimizer clears the embedding's trace (the rows and gradients of the
            # steps so far) only after zero_grad(): without it every step re-applies all earlier
            # gradients and keeps them (measured: +40 MB and a slower step each step)
            sparse_opt.zero_grad()
            loss.backward()
            t3 = time.perf_counter()
            for p in dense:
                if p.grad is not None:
                    tdist.all_reduce(p.grad)
                    p.grad /= W
            if dense_opt is not None:
                dense_opt.step()
            sparse_opt.step()
            t4 = time.perf_counter()
            if emb._trace:
                raise RuntimeError(f"DistEmbedding still traces {len(emb._trace)} batches after the optimizer step")
            lv = float(loss)
            loss_sum += lv
            # the block-building numpy work sits in compute (t2..t3); sampling ends at the last block
            batches.append({"sampling": t1 - t0, "remote_fetch": t2 - t1, "compute": t3 - t2, "grad_sync": t4 - t3,
                            "total": t4 - t0, "input_nodes": int(len(input_nodes)), "seeds": int(len(seeds)),
                            "remote_rows": remote_rows, "remote_edges": remote_edges,
                            "edges": [int(b.num_edges()) for b in blocks]})
            step += 1
            if store is not None:
                store.add_step(spec.run_id, step, epoch, lv, t4 - t0)
        ep_s = time.perf_counter() - t_epoch
        t_train += ep_s
        epoch_seconds.append(ep_s)
        if store is not None:
            store.add_epoch(spec.run_id, epoch, ep_s, steps, loss_sum / max(steps, 1))
        if epoch % spec.eval_every == 0 or epoch == spec.epochs:
            tdist.barrier()
            stop = torch.zeros(1, dtype=torch.int64)
            if index == 0:
                m = _evaluate(emb, model, full_graph, dataset, orig_nids, eval_users, "valid")
                history.append({"epoch": epoch, "step": step, "elapsed_s": t_train, **m})
                if store is not None:
                    store.add_eval(spec.run_id, epoch, step, "valid", m, t_train)
                if t_target is None and spec.target_recall is not None and m["recall@20"] >= spec.target_recall:
                    t_target = t_train
                if stopper.update(epoch, m.get("recall@20", float("-inf"))):
                    best, best_epoch = m, epoch
                    np.save(spec.path("best_emb.npy"), model.embedding.detach().numpy())
                elif stopper.should_stop(epoch):
                    stop[0] = 1
                    print(f"trainer 0: early stop after epoch {epoch}: valid recall@20 did not improve for "
                          f"{epoch - stopper.best_epoch} epochs (best at epoch {stopper.best_epoch})", flush=True)
            tdist.broadcast(stop, 0)      # every trainer leaves the loop together
            if int(stop):
                break
    out = {"batches": batches, "epoch_seconds": epoch_seconds, "train_seconds": t_train, "steps": step,
           "steps_per_epoch": steps, "per_trainer_batch": per_batch, "local_interactions": int(len(mine)),
           "n_nodes": n_nodes, "row_bytes": row_bytes}
    if index == 0:
        test = {}
        if best_epoch >= 0:
            model.embedding.data.copy_(torch.from_numpy(np.load(spec.path("best_emb.npy"))))
            with kernels.use_backend("native"):
                test = evaluate(model, full_graph.adj, dataset, "test", users=eval_users)
            if store is not None:
                store.add_eval(spec.run_id, best_epoch, step, "test", test, t_train)
        out.update(history=history, best_valid=best, best_epoch=best_epoch, test=test, time_to_target_s=t_target)
    return out


def _evaluate(emb, model, graph, dataset, orig_nids, users, split) -> dict:
    """The lab's full-ranking evaluation: every row of the distributed table pulled, put back in
    the lab's node order, propagated over the full graph with the lab's kernels, ranked."""
    import torch

    from . import kernels
    from .evaluate import evaluate
    n = len(orig_nids)
    table = torch.empty((n, model.embedding.shape[1]))
    for s in range(0, n, 1 << 16):
        ids = torch.arange(s, min(n, s + (1 << 16)))
        table[torch.from_numpy(orig_nids[s:s + len(ids)])] = emb.weight[ids]
    model.embedding.data.copy_(table)
    with kernels.use_backend("native"):
        return evaluate(model, graph.adj, dataset, split, users=users)


# -- the neighbourhood explosion, without DGL -----------------------------------------------------
def explosion_factor(graph, layers: int, batch_size: int, fanout: int = 10, batches: int = 3,
                     seed: int = 0) -> dict:
    """Nodes a sampled mini-batch touches (its input nodes) per graph node, for a ``layers``-deep
    model with ``fanout`` neighbours per layer and BPR batches of ``batch_size`` triples, from the
    lab's own sampler (:func:`gnnrec_lab.sampling.sample_subgraph`, the GraphSAGE/DGL semantics the
    DistDGL run samples with). Full-graph training touches every node every step (factor 1);
    the mean over ``batches`` batches (measured on the sampled sub-graphs, not timed)."""
    from .sampling import batch_nodes, bpr_batches, sample_subgraph
    rng = np.random.default_rng(seed)
    touched, seeds = [], []
    for u, p, n in bpr_batches(graph, batch_size, rng, max_batches=batches):
        sg = sample_subgraph(graph, batch_nodes(graph, u, p, n), [fanout] * layers, rng)
        touched.append(sg.n_nodes_hop[-1])
        seeds.append(sg.n_seeds)
    return {"layers": layers, "batch_size": batch_size, "fanout": fanout, "n_nodes": graph.n_nodes,
            "seeds_per_batch": float(np.mean(seeds)), "input_nodes_per_batch": float(np.mean(touched)),
            "explosion_factor": float(np.mean(touched)) / graph.n_nodes}


# -- what the notebook and the Compare page show -------------------------------------------------
COMPARISON_COLUMNS = ["id", "engine", "dataset", "model", "layers", "batch_size", "epoch_s", "time_to_target_s",
                      "best_valid_recall@20", "test_recall@20", "explosion_factor", "batch_ms", "partitions"]


def comparison_row(result: dict, run_id=None) -> dict:
    """One run (a RunResult's or a DistDGL run's result dict) as a row of :func:`comparison_frame`."""
    cfg = result.get("config") or {}
    engine = result.get("engine") or ("full" if cfg.get("mode", "full") == "full" else "sampled")
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
            "partitions": ((result.get("info") or {}).get("distributed") or {}).get("partitions")}


def comparison_frame(store=None, run_ids=None, results=()):
    """Finished runs, full-graph and DistDGL side by side (one row per run, all measured):
    ``engine`` (``full``, ``sampled`` or ``distdgl``), mean epoch seconds, time to the Recall@20
    target, best validation and test Recall@20, the neighbourhood-explosion factor (input nodes
    per batch / graph nodes; 1 for full-graph training, which propagates every node every step)
    and DistDGL's median batch time. Rows come from ``store`` (``run_ids`` or every finished
    run) and from ``results`` (result dicts not in a store)."""
    import pandas as pd
    rows = [comparison_row(r) for r in results]
    if store is not None:
        for rid in (store.run_ids(RunStatus.FINISHED) if run_ids is None else list(run_ids)):
            res = store.get_run(rid).get("result")
            if res:
                rows.append(comparison_row(res, rid))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def dgl_lane_python() -> Optional[Path]:
    """The DGL lane's interpreter (``make dgl``: ``.venv-dgl`` beside the package), if built."""
    p = Path(__file__).resolve().parents[1] / ".venv-dgl" / "bin" / "python"
    return p if p.exists() else None


# -- summarising the trainers' reports -----------------------------------------------------------
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
    return {
        "batch_seconds_median": med, "batch_seconds_mean": mean,
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


def run(spec: DistSpec, dataset, method: str = "metis", store=None, config=None, progress=print) -> dict:
    """Partition, launch, wait, summarise; records the run when ``store``/``config`` are given."""
    require_dgl()
    Path(spec.workdir).mkdir(parents=True, exist_ok=True)
    part = partition(dataset, spec, method)
    progress(f"partitioned {dataset.name} into {spec.partitions} ({method}) in {part['partition_seconds']:.2f} s "
             f"(measured); nodes per partition {part['nodes_per_partition']}")
    ports = _free_ports(spec.partitions + 1)
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
                {"kind": "local" if all(_is_local(h) for h in ip_hosts(spec)) else "hosts",
                 "machines": [{"index": i, "address": h} for i, h in enumerate(ip_hosts(spec))]}}
        if store is not None:
            store.record_start(spec.run_id, {"host": host_info(), "engine": ENGINE, "distributed": info,
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
    r0 = reports[0]
    summary = summarize(reports)
    result = {
        "engine": ENGINE, "kind": Provenance.MEASURED, "status": RunStatus.FINISHED,
        "config": config.to_dict() if config else None,
        "epochs": len(r0["epoch_seconds"]), "steps": r0["steps"], "train_seconds": r0["train_seconds"],
        "epoch_seconds": r0["epoch_seconds"], "best_epoch": r0["best_epoch"], "best_valid": r0["best_valid"],
        "test": r0["test"], "history": r0["history"], "time_to_target_s": r0["time_to_target_s"],
        "phases": {k: float(sum(b[k] for b in r0["batches"])) for k in PHASES},
        "info": {"engine": ENGINE, "distributed": info},
        "distributed": {**summary, "wall_seconds": wall,
                        "startup_seconds": [r["startup_seconds"] for r in reports],
                        "trainer_peak_rss_bytes": [r.get("peak_rss_bytes") for r in reports],
                        "row_check": [r["check"] for r in reports],
                        "trainer_cores": [r.get("cores") for r in reports],
                        "trainer_gloo_interface": [r.get("gloo_interface") for r in reports],
                        "steps_per_epoch": r0["steps_per_epoch"], "per_trainer_batch": r0["per_trainer_batch"],
                        "local_interactions": [r["local_interactions"] for r in reports],
                        "cluster": {**info["cluster"], "link_bytes": links,
                                    "link_bytes_kind": None if links is None else
                                    "measured (each machine's interface counters over the run)"}},
    }
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
