"""The neighbourhood explosion without DGL: how many nodes a sampled mini-batch touches, per graph
node, by depth and batch size, from the lab's own sampler (full-graph training touches every node
every step)."""
from __future__ import annotations

import numpy as np


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
