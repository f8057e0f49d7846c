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
machines (each machine then runs ``python -m gnnrec_lab.distributed.engine machine SPEC I`` itself, with
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

from gnnrec_lab import data
from gnnrec_lab.distributed.cluster import EmulatedCluster
from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.graph.bipartite import CSR, BipartiteGraph
from gnnrec_lab.models import build_model  # loads no torch (gnnrec_lab.models.registry)
from gnnrec_lab.runs.store import Store, StoreReporter
from gnnrec_lab.training.reporting import Reporter
from gnnrec_lab.training.step import Step, target_outcome
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.proc import host_info, load_sample
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

ENGINE = "distdgl"
GRAPH_PREFIX = "gnnrec"
PHASES = ("sampling", "remote_fetch", "compute", "grad_sync")
SHM_SIZE = "4g"                 # the tmpfs each machine's /dev/shm gets (allocated on use only)
PRIVATE_SHM_ENV = "GNNREC_LAB_PRIVATE_SHM"   # set by the launcher on machines it put in `unshare -m`


def dgl_available() -> bool:
    from gnnrec_lab.kernels import _dgl_importable
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
    the others must be started on their hosts (``python -m gnnrec_lab.distributed.engine machine SPEC I``,
    the work folder shared at the same path); done when every local machine exited 0 and every
    trainer's report is there."""
    procs: dict = {}
    for i, host in enumerate(ip_hosts(spec)):
        if cluster is None and not _is_local(host):
            print(f"machine {i} is {host}: start it there with `GLOO_SOCKET_IFNAME=<its interface on "
                  f"{host}'s network> taskset -c <its cores> .venv-dgl/bin/python -m gnnrec_lab.distributed.engine "
                  f"machine "
                  f"{spec.path('spec.json')} {i}` (docs/dgl.md)", file=sys.stderr)
            continue
        cmd = [sys.executable, "-m", "gnnrec_lab.distributed.engine", "machine", str(spec.path("spec.json")), str(i)]
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
        return subprocess.Popen([sys.executable, "-m", "gnnrec_lab.distributed.engine", role, spec_path, str(index)],
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
    LightGCN weights of :func:`gnnrec_lab.graph.sampling.sample_subgraph`:
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


class _TrainerReporter(StoreReporter):
    """Trainer 0's reporter: steps, epochs, evaluations, events and load go to the store as the
    loop reports them; the launcher records the run's start and its whole result (every trainer's
    report folded in)."""

    def on_start(self, config, info) -> None:
        pass

    def on_finish(self, result) -> None:
        pass


class DistDGLStep(Step):
    """DistDGL's step in the lab's training loop (:func:`gnnrec_lab.training.loop.run_loop`): the trainer's
    BPR triples, DGL's distributed neighbour sampling into blocks, the layer-0 rows and degrees of
    the input nodes fetched from the ``DistEmbedding``, the lab's model and kernels on the blocks,
    the dense gradients all-reduced and ``SparseAdam``'s row update. Each phase is timed
    (``batches``: one dict per mini-batch). Every trainer runs the loop; trainer 0 leads (evaluates,
    decides early stopping, writes the store), the others follow through :meth:`agree` (each step:
    the mean loss over the trainers and any stop request) and :meth:`decide` (after each evaluation)."""

    def __init__(self, spec: DistSpec, index: int, g, local, new_of_orig, orig_nids, model, emb, sparse_opt,
                 dense_opt):
        self.spec, self.index, self.g, self.local = spec, index, g, local
        self.new_of_orig, self.orig_nids = new_of_orig, orig_nids
        self.model, self.emb, self.sparse_opt, self.dense_opt = model, emb, sparse_opt, dense_opt
        self.dense = [p for n, p in model.named_parameters() if n != "embedding"]
        self.pb = g.get_partition_book()
        self.me = self.pb.partid
        self.W = spec.partitions
        self.per_batch = max(1, spec.batch_size // self.W)
        self.leader = index == 0
        self.batches_done: list = []     # per mini-batch: phase seconds, total, counts

    def batches(self, run, epoch):
        print(f"trainer {self.index}: epoch {epoch} of {self.spec.epochs}", flush=True)   # progress, in its log
        # one generator per epoch and trainer, as train.py seeds one per epoch; it cycles, so a
        # partition with fewer interactions than its share of the epoch never runs dry
        rng = np.random.default_rng((self.spec.seed, epoch, self.index))

        def cycle():
            from gnnrec_lab.graph.sampling import bpr_batches
            while True:
                yield from bpr_batches(self.local, self.per_batch, rng)
        return cycle()

    def step(self, run, batches, lr):
        import dgl
        import torch
        import torch.distributed as tdist

        from gnnrec_lab.models.loss import bpr_loss_rows
        spec, g, pb, me, emb, model = self.spec, self.g, self.pb, self.me, self.emb, self.model
        recorder, n_users = run.recorder, run.dataset.n_users
        t0 = time.perf_counter()
        users, pos, neg = next(batches)
        orig = np.concatenate([users, pos + n_users, neg + n_users])
        seeds, inv = np.unique(self.new_of_orig[orig], return_inverse=True)
        blocks, remote_edges = [], 0
        frontier_nodes = torch.from_numpy(seeds)
        for fan in spec.fanouts:
            fr = dgl.distributed.sample_neighbors(g, frontier_nodes, int(fan))
            remote_edges += int((pb.nid2partid(fr.edges()[1]) != me).sum())
            blk = dgl.to_block(fr, frontier_nodes)
            blocks.append(blk)
            frontier_nodes = blk.srcdata[dgl.NID]
        t1 = time.perf_counter()
        input_nodes = frontier_nodes
        deg = g.ndata["deg"][input_nodes].numpy()
        x = emb(input_nodes)
        remote_rows = int((pb.nid2partid(input_nodes) != me).sum())
        t2 = time.perf_counter()
        with recorder.in_phase("forward"):
            csrs = [_block_csr(b, deg[:b.num_src_nodes()]) for b in blocks]
            x = x.contiguous()
            out = model.propagate_blocks(csrs, x)
        with recorder.in_phase("loss"):
            n_b = len(users)
            rows = [torch.from_numpy(inv[k * n_b:(k + 1) * n_b].astype(np.int64)) for k in range(3)]
            loss, _ = bpr_loss_rows(out, x, *rows, spec.l2)
        with recorder.in_phase("backward"):
            if self.dense_opt is not None:
                self.dense_opt.zero_grad(set_to_none=True)
            # DGL's sparse optimizer clears the embedding's trace (the rows and gradients of the
            # steps so far) only after zero_grad(): without it every step re-applies all earlier
            # gradients and keeps them (measured: +40 MB and a slower step each step)
            self.sparse_opt.zero_grad()
            loss.backward()
        t3 = time.perf_counter()
        for p in self.dense:
            if p.grad is not None:
                tdist.all_reduce(p.grad)
                p.grad /= self.W
        if self.dense_opt is not None:
            self.dense_opt.step()
        self.sparse_opt.step()
        t4 = time.perf_counter()
        if emb._trace:
            raise RuntimeError(f"DistEmbedding still traces {len(emb._trace)} batches after the optimizer step")
        # the block-building numpy work sits in compute (t2..t3); sampling ends at the last block
        self.batches_done.append({"sampling": t1 - t0, "remote_fetch": t2 - t1, "compute": t3 - t2,
                                  "grad_sync": t4 - t3, "total": t4 - t0, "input_nodes": int(len(input_nodes)),
                                  "seeds": int(len(seeds)), "remote_rows": remote_rows,
                                  "remote_edges": remote_edges, "edges": [int(b.num_edges()) for b in blocks]})
        return loss

    def agree(self, loss, halt):
        """The mean of the trainers' losses (the loss of the whole batch, as a full-graph step's
        is) and whether any trainer was asked to stop, in one all-reduce."""
        import torch
        import torch.distributed as tdist
        t = torch.tensor([float(loss.detach()), 1.0 if halt else 0.0], dtype=torch.float64)
        tdist.all_reduce(t)
        return float(t[0]) / self.W, bool(t[1] > 0)

    def gather(self, run):
        """Every trainer's updates are in (barrier); trainer 0 pulls every row of the distributed
        table back into the model, in the lab's node order, for the lab's full-ranking evaluation."""
        import torch
        import torch.distributed as tdist
        tdist.barrier()
        if not self.leader:
            return
        n, chunk = len(self.orig_nids), 1 << 16
        table = torch.empty((n, self.model.embedding.shape[1]))
        for s in range(0, n, chunk):
            ids = torch.arange(s, min(n, s + chunk))
            table[torch.from_numpy(self.orig_nids[s:s + len(ids)])] = self.emb.weight[ids]
        self.model.embedding.data.copy_(table)

    def decide(self, stop):
        import torch
        import torch.distributed as tdist
        flag = torch.tensor([1 if stop else 0], dtype=torch.int64)
        tdist.broadcast(flag, 0)      # every trainer leaves the loop together
        return bool(int(flag))


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
    out = {"batches": step.batches_done, "epoch_seconds": result.epoch_seconds,
           "train_seconds": result.train_seconds, "steps": result.steps, "steps_per_epoch": steps,
           "per_trainer_batch": step.per_batch, "local_interactions": int(len(mine)), "n_nodes": n_nodes,
           "row_bytes": spec.dim * 4}
    if leader:
        out["result"] = result.to_dict()
    return out


# -- the neighbourhood explosion, without DGL -----------------------------------------------------
def explosion_factor(graph, layers: int, batch_size: int, fanout: int = 10, batches: int = 3,
                     seed: int = 0) -> dict:
    """Nodes a sampled mini-batch touches (its input nodes) per graph node, for a ``layers``-deep
    model with ``fanout`` neighbours per layer and BPR batches of ``batch_size`` triples, from the
    lab's own sampler (:func:`gnnrec_lab.graph.sampling.sample_subgraph`, the GraphSAGE/DGL semantics the
    DistDGL run samples with). Full-graph training touches every node every step (factor 1);
    the mean over ``batches`` batches (measured on the sampled sub-graphs, not timed)."""
    from gnnrec_lab.graph.sampling import batch_nodes, bpr_batches, sample_subgraph
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


def dgl_lane_python() -> Optional[Path]:
    """The DGL lane's interpreter (``make dgl``: ``.venv-dgl`` beside the package), if built."""
    p = Path(__file__).resolve().parents[2] / ".venv-dgl" / "bin" / "python"
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
    from gnnrec_lab.training.loop import _eval_users
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
                        "cluster": {**info["cluster"], "link_bytes": links,
                                    "link_bytes_kind": None if links is None else
                                    "measured (each machine's interface counters over the run)"}},
    }


def _delta(before, after):
    return None if before is None or after is None else after - before


def _main(argv) -> int:
    role, spec_path, index = argv[0], argv[1], int(argv[2])
    fn = {"machine": machine_main, "server": server_main, "trainer": trainer_main}[role]
    return int(fn(spec_path, index) or 0)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
