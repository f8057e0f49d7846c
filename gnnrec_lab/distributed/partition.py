"""The partitioned graph: the lab's training graph as a DGL graph and DGL's partitioner (METIS or
random) writing the partitions, with the partitioner's node id map, into the run's work folder."""
from __future__ import annotations

import contextlib
import json
import time

import numpy as np

from gnnrec_lab.distributed.spec import DistSpec

GRAPH_PREFIX = "gnnrec"   # a run's graph name: GRAPH_PREFIX, its run id and its folder's inode


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
