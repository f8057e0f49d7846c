"""DistDGL's mini-batch in the lab's training loop (:class:`DistDGLStep`): the trainer's BPR
triples, DGL's distributed neighbour sampling into blocks (each as the lab's CSR),
the remote rows, the lab's model and kernels, the gradient sync; each phase timed."""
from __future__ import annotations

import time

import numpy as np

from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.graph.bipartite import CSR
from gnnrec_lab.training.step import Step


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
        self.lrs: list = []              # the learning rate each step gave both optimizers

    def batches(self, run, epoch):
        print(f"trainer {self.index}: epoch {epoch} of {self.spec.epochs}", flush=True)   # progress, in its log
        # one generator per epoch and trainer, as train.py seeds one per epoch; it cycles, so a
        # partition with fewer interactions than its share of the epoch never runs dry
        rng = np.random.default_rng((self.spec.seed, epoch, self.index))

        def cycle():
            from gnnrec_lab.graph.sampling import bpr_batches
            while True:
                yield from bpr_batches(self.local, self.per_batch, rng, sampler=self.spec.sampler)
        return cycle()

    def step(self, run, batches, lr):
        import dgl
        import torch
        import torch.distributed as tdist

        from gnnrec_lab.models.loss import bpr_loss_rows
        spec, g, pb, me, emb, model = self.spec, self.g, self.pb, self.me, self.emb, self.model
        recorder, n_users = run.recorder, run.dataset.n_users
        # the loop's learning rate of this step (the batch-size rule, warm-up, schedule: models.optim.lr_at),
        # which it has set on the dense optimizer (run.opt): DGL's SparseAdam takes it here
        self.sparse_opt._lr = lr
        self.lrs.append(lr)
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
        # the lab's glue, timed apart (DistDGL's own examples do neither): the full-graph degrees
        # fetched for the LightGCN weights, and each block turned into the lab's CSR
        td = time.perf_counter()
        deg = g.ndata["deg"][input_nodes].numpy()
        t_deg = time.perf_counter() - td
        x = emb(input_nodes)
        remote_rows = int((pb.nid2partid(input_nodes) != me).sum())
        t2 = time.perf_counter()
        with recorder.in_phase("forward"):
            tc = time.perf_counter()
            csrs = [_block_csr(b, deg[:b.num_src_nodes()]) for b in blocks]
            t_csr = time.perf_counter() - tc
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
                                  "grad_sync": t4 - t3, "total": t4 - t0, "glue_degree_fetch": t_deg,
                                  "glue_block_csr": t_csr, "input_nodes": int(len(input_nodes)),
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
