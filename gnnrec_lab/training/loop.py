"""Training of a GNN recommender with BPR loss (full-graph or sampled mini-batches).

The run, as :func:`_train` reads top to bottom: prepare (dataset, graph, model and optimizer at
their placements), compile the kernels, then :func:`run_loop`: per epoch the steps, evaluate-and-stop,
and finish (test, totals, the result reported once).

The loop is one code path for every engine: what differs is the :class:`Step` it is given, how
one training step is taken (:class:`FullStep`, :class:`SampledStep` here; DistDGL's trainer brings
its own, :class:`gnnrec_lab.distributed.step.DistDGLStep`). Epochs and steps counted from 1, evaluation
(the same seeded users, every ``eval_every`` epochs and after the last, its time kept out of the
training time), early stopping, the best epoch, the time to the Recall@20 target
(:func:`target_outcome`) and what the reporter is told are the loop's, whatever the step.

One step:

1. *sampling* – the next batch of (user, positive, negative) triples;
2. *forward*  – propagate **all** node embeddings through all layers;
3. *loss*     – BPR on the batch plus L2 on its layer-0 embeddings;
4. *backward* – gradients through every layer;
5. *optimizer* – one update of all parameters.

Every phase runs inside ``recorder.in_phase(...)``; the kernels record their
own calls, and the loop records sampling and the optimizer step itself. The
recorder's records for the step go to the reporter (the run store, the CLI).
"""
from __future__ import annotations

import math
import operator
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from gnnrec_lab import data, kernels
from gnnrec_lab.cache.rows import make_row_store
from gnnrec_lab.config.memory_modes import memory_mode_of
from gnnrec_lab.config.run import RunConfig, expect_config
from gnnrec_lab.graph.bipartite import BipartiteGraph
from gnnrec_lab.graph.sampling import Prefetcher, batch_nodes, bpr_batches, sample_subgraph
from gnnrec_lab.kernels import Span
from gnnrec_lab.memory.calibrate import host_profile
from gnnrec_lab.memory.footprint import Footprint, footprint, peak_rss_bytes
from gnnrec_lab.memory.placement import allocate, place_array, place_of, place_tensor
from gnnrec_lab.memory.preflight import batch_size_error
from gnnrec_lab.models import build_model
from gnnrec_lab.models.loss import bpr_loss, bpr_loss_rows
from gnnrec_lab.models.optim import build_optimizer, lr_at, state_tensors
from gnnrec_lab.models.registry import model_spec
from gnnrec_lab.training.evaluate import evaluate
from gnnrec_lab.training.reporting import MultiReporter, ProgressReporter, Reporter
from gnnrec_lab.training.step import Step, target_line, target_outcome
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.pinning import compute_threads, pinned
from gnnrec_lab.util.proc import host_info, load_sample
from gnnrec_lab.util.provenance import Provenance, part, parts
from gnnrec_lab.util.recorder import (
    STORE_KEY,
    TOTAL_FIELDS,
    Recorder,
    get_recorder,
    profiler_range,
    store_key,
    sum_records,
    totals_rows,
    use_recorder,
)
from gnnrec_lab.util.signals import StopSignals
from gnnrec_lab.util.status import RunStatus

# Rank every user unless that means scoring more than this many (user, item) pairs.
FULL_RANKING_MAX_PAIRS = 5e10
EVAL_SAMPLE_USERS = 10_000
COMPILING_MESSAGE = ("compiling kernels: numba has no disk-cached build of them yet (first run after an install "
                     "or a kernel change); about 1.5 min on 2 cores, once (`gnnrec-lab warmup` does it ahead)")
# Sub-graphs the sampler may build ahead of training for the look-ahead oracle (memory bound).
MAX_SAMPLE_AHEAD = 64


@dataclass
class RunResult:
    """What a finished run returns (and the CLI prints with ``--json``)."""

    config: RunConfig
    status: RunStatus = RunStatus.FINISHED   # finished | cancelled | interrupted | diverged (DivergenceBound)
    epochs: int = 0
    steps: int = 0
    train_seconds: float = part(Provenance.MEASURED, default=0.0)   # wall time in training steps
    epoch_seconds: list = part(Provenance.MEASURED, default_factory=list)
    best_epoch: int = -1
    best_valid: dict = part(Provenance.MEASURED, default_factory=dict)
    test: dict = part(Provenance.MEASURED, default_factory=dict)
    history: list = part(Provenance.MEASURED, default_factory=list)  # per evaluation: epoch, step, elapsed_s, metrics
    time_to_target_s: Optional[float] = None
    target: dict = field(default_factory=dict)   # target_outcome(): the target, reached or not (empty: none set)
    kernels: list = part(Provenance.MEASURED, default_factory=list)  # per (kernel, phase) totals
    phases: dict = part(Provenance.MEASURED, default_factory=dict)   # seconds per phase
    footprint: Footprint = field(default_factory=Footprint)  # bytes: predicted by class (modeled), peak RSS (measured)
    info: dict = field(default_factory=dict)             # dataset counts, host, eval sampling
    jit_seconds: float = part(Provenance.MEASURED, default=0.0)
    step_records: list = field(default_factory=list)     # one steady-state step's KernelRecords (trace)
    modeled: dict = part(Provenance.MODELED, default_factory=dict)  # tier-model projection for non-DRAM memory modes

    def kernel_frame(self):
        import pandas as pd
        return pd.DataFrame(self.kernels)

    def breakdown(self):
        """Kernel x phase table (pandas) of this run's measured kernel time."""
        from gnnrec_lab.memory.analysis import breakdown
        return breakdown(self.kernel_frame())

    def to_dict(self) -> dict:
        return {
            "config": self.config.to_dict(), "status": self.status, "epochs": self.epochs,
            "steps": self.steps, "train_seconds": self.train_seconds,
            "epoch_seconds": self.epoch_seconds, "best_epoch": self.best_epoch,
            "best_valid": self.best_valid, "test": self.test, "history": self.history,
            "time_to_target_s": self.time_to_target_s, "target": self.target, "kernels": self.kernels,
            "phases": self.phases, "footprint": self.footprint.to_dict(), "info": self.info,
            "jit_seconds": self.jit_seconds, "modeled": self.modeled,
            # each part's kind: times, metrics and kernels measured here; the footprint holds both;
            # ``modeled`` (non-DRAM memory modes) is the tier model's projection
            "kind": parts(self),
        }


class EarlyStopping:
    """Stop when validation Recall@20 has not reached a new best for ``patience`` epochs (0: never).

    Counted in epochs since the best, not in evaluations, so ``eval_every`` does not stretch it.
    The default patience (RunConfig) outlasts the plateau LightGCN crosses on ML-100K with the
    reference protocol: validation Recall@20 stalls near 0.255 from epoch ~23 to ~47, then climbs
    to ~0.33 by epoch 200; a patience of 5 (or RecBole's 10) ended runs on that plateau at 74% of
    the reference accuracy (docs/accuracy.md).
    """

    def __init__(self, patience: int):
        self.patience = int(patience)
        self.best, self.best_epoch = float("-inf"), -1

    def update(self, epoch: int, value: float) -> bool:
        """Record the evaluation after ``epoch``; return whether it is a new best (ties are not)."""
        if value > self.best:
            self.best, self.best_epoch = value, epoch
            return True
        return False

    def should_stop(self, epoch: int) -> bool:
        return bool(self.patience) and self.best_epoch >= 0 and epoch - self.best_epoch >= self.patience


class _KernelTotals:
    """Running per-(kernel, phase, pattern, row width) sums so long runs do not keep every record."""

    KEY = ("name", "phase", "pattern", "row_bytes")

    def __init__(self):
        self.tot: dict = {}

    def add(self, records):
        sum_records(records, operator.attrgetter(*self.KEY), into=self.tot)

    def rows(self) -> list[dict]:
        return sorted(totals_rows(self.tot, self.KEY), key=lambda row: -row["ns"])


def _record_steps(opt, config) -> None:
    """Record every ``opt.step()`` as one optimizer kernel named ``config.optimizer``, timed from
    torch's step pre-hook to its post-hook: the update and torch's step wrapper's no-grad and hook
    handling, inside torch's ``Optimizer.step#...`` profiler event. Bytes: parameters, gradients
    and state read, parameters and state written."""
    n = sum(p.numel() for g in opt.param_groups for p in g["params"])
    s = state_tensors(config.optimizer, config.momentum)
    backend = "torch"   # torch's fused Adam, AdamW, SGD; LAMB is torch ops too
    cost = dict(bytes_read=(2 + s) * n * 4, bytes_written=(1 + s) * n * 4, flops=10 * n, pattern="stream")
    held = []

    def pre(*_):
        # the step runs between the hooks: a profiler range (a shared no-op without a profiler)
        # is opened here and closed in post
        rng = profiler_range(config.optimizer, get_recorder().phase)
        rng.__enter__()
        held.append((Span(), rng))

    def post(*_):
        if held:
            span, rng = held.pop()
            rng.__exit__(None, None, None)
            span.run(config.optimizer, -1, None, backend, lambda: cost, lambda: None, profile=False)
    opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(post)


def train(config: RunConfig, *, reporter: Optional[Reporter] = None, progress: bool = False,
          dataset=None) -> RunResult:
    """Train ``config`` in this process; return the measured :class:`RunResult`.

    ``progress`` shows tqdm bars and per-evaluation lines on stderr (the CLI).
    ``dataset`` may be passed to skip loading (notebooks reuse one). Thread counts the run
    sets (``threads``, or one core left to a slow tier's I/O) are restored afterwards.
    """
    if dataset is not None and not isinstance(dataset, data.Dataset):
        raise UserError(f"dataset: expected a gnnrec_lab.data.Dataset (gnnrec_lab.data.load(name)), got "
                        f"{type(dataset).__name__} {dataset!r:.60}; to train on another dataset by name, set "
                        f"RunConfig(dataset=...)")
    import numba
    prev = torch.get_num_threads(), numba.get_num_threads()
    try:
        with pinned(config.cores):   # --cores C: the process on C cores of its own (gnnrec_lab.util.pinning)
            return _train(config, reporter, progress, dataset)
    finally:
        torch.set_num_threads(prev[0])
        numba.set_num_threads(prev[1])


def _train(config: RunConfig, reporter, progress, dataset) -> RunResult:
    expect_config(config, "train")   # a RunConfig is checked when built and frozen after
    rep = MultiReporter(reporter, ProgressReporter() if progress else None)
    _set_threads(config)
    torch.manual_seed(config.seed)
    # SIGINT/SIGTERM only raise a flag while the run is in this process's hands: the loop reads it
    # between steps (a signal handled inside a numba kernel would end the run with a SystemError)
    with StopSignals() as signals:
        run = _prepare(config, dataset, progress)
        run.signals = signals
        _compile_kernels(run, rep)
        return run_loop(run, rep, SampledStep(run) if run.sampled else FullStep())


def run_loop(run: "TrainingRun", rep: Reporter, step: "Step") -> RunResult:
    """Epochs of ``step``'s training steps, each followed by evaluate-and-stop; then the test of the
    best validated model and the finished result (reported once). Every engine's runs go through
    here (full-graph, sampled, DistDGL's trainers), so they count, evaluate, stop and report alike."""
    config = run.config
    ended: Optional[RunStatus] = None   # diverged, cancelled or interrupted when the run ends early
    with use_recorder(run.recorder), step:
        for epoch in range(1, config.epochs + 1):
            if run.signals.signum is not None:   # arrived while preparing, compiling or evaluating
                ended = _note_stop(run, rep, run.signals.status, epoch - 1)
                break
            ended = _train_epoch(run, rep, epoch, step)
            if ended or _evaluate_and_check_stop(run, rep, epoch, step):
                break
        # no test metrics for a diverged model (they would look like a result), nor after a signal
        # (whoever sent it wants the run to end now)
        if ended is not RunStatus.DIVERGED and run.signals.signum is None:
            _test(run, step)
        return _finish(run, rep, ended, step)


class FullStep(Step):
    """Full-graph training: propagate every node's embedding each step (:func:`_full_step`)."""

    def batches(self, run, epoch):
        # one generator per epoch (seeded (seed, epoch); the sampled mode's sampler does the same);
        # the epoch's BPR arrays (24 B per interaction) go with it before evaluation
        return bpr_batches(run.graph, run.config.batch_size, np.random.default_rng((run.config.seed, epoch)),
                           max_batches=run.steps_per_epoch, sampler=run.config.sampler)

    def step(self, run, batches, lr):
        return _full_step(run, batches)


class SampledStep(Step):
    """Sampled mini-batches from one sampler thread for all epochs (:func:`_sampled_step`); the
    embedding rows live in the run's row store."""

    def __init__(self, run):
        self.sampler = _sampled_batches(run.graph, run.config, run.steps_per_epoch)
        self.cover = None

    def __enter__(self):
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc):
        return self.sampler.__exit__(*exc)

    def batches(self, run, epoch):
        self.cover = _Coverage(run.graph.n_nodes)
        return self.sampler

    def step(self, run, batches, lr):
        return _sampled_step(run, batches, lr, self.cover)

    def end_epoch(self, run, epoch, ended):
        # evaluation reads the whole table; the sampler runs on into the next epoch, so an
        # oracle cache can prefetch its first batches meanwhile
        run.row_store.sync(keep_future=ended is not RunStatus.CANCELLED and epoch < run.config.epochs)
        run.sampled_stats["redundancy"].append(self.cover.redundancy())

    def finish(self, run):
        run.row_store.close()
        run.result.info["sampled"] = _sampled_info(run.config, run.sampled_stats, run.row_store)


@dataclass
class TrainingRun:
    """What the loop works on: built by :func:`_prepare` (or an engine's own set-up), advanced by
    the steps, read by :func:`_finish`."""

    config: RunConfig
    dataset: object
    graph: BipartiteGraph
    model: torch.nn.Module
    opt: Optional[torch.optim.Optimizer]     # sampled mode: dense weights only (None for a plain table)
    row_store: object                        # sampled mode's embedding rows (None otherwise)
    steps_per_epoch: int
    total_steps: int
    eval_users: Optional[np.ndarray]         # None: rank every user
    result: RunResult
    recorder: Recorder = field(default_factory=Recorder)
    totals: _KernelTotals = field(default_factory=_KernelTotals)
    # the store's grouping (recorder.store_key): what the tier model projects
    tier_totals: dict = field(default_factory=dict)
    # per step, the same grouping's totals and the step's seconds: the tier model's robust base
    # (tiermodel.step_base: per-kernel medians, stalled steps left out)
    tier_steps: list = field(default_factory=list)
    step_seconds: dict = field(default_factory=dict)
    phase_s: dict = field(default_factory=dict)
    sampled_stats: dict = field(default_factory=lambda: {"redundancy": [], "batches": 0, "nodes_per_layer": None,
                                                         "edges_per_layer": None, "build_seconds": 0.0})
    stopper: Optional[EarlyStopping] = None
    divergence: "DivergenceBound" = field(default_factory=lambda: DivergenceBound())
    signals: StopSignals = field(default_factory=StopSignals)   # train() installs the live one
    best_state: Optional[dict] = None
    step: int = 0
    t_train: float = 0.0
    load: dict = field(default_factory=dict)   # proc.load_sample() at "start", "middle", "end"
    evaluations: int = 0                       # validations due so far (every process counts them)
    target_about: dict = field(default_factory=dict)   # where the target came from (target_outcome)

    @property
    def sampled(self) -> bool:
        return self.config.mode == "sampled"

    @property
    def key(self) -> str:
        """The validation metric early stopping and the target read."""
        return f"recall@{20 if 20 in self.config.topk else max(self.config.topk)}"


def _set_threads(config) -> None:
    threads = compute_threads(config)
    if threads:
        import numba
        torch.set_num_threads(threads)
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def _prepare(config, dataset, progress) -> TrainingRun:
    """Dataset, graph, model and optimizer at their placements; the result's static info."""
    if dataset is None:
        dataset = data.load(config.dataset, seed=config.seed, data_dir=config.data_dir, progress=progress,
                            protocol=config.protocol)
    n_train = len(dataset.train)
    if n_train == 0:
        raise UserError(f"dataset {config.dataset!r} has no training interactions")
    err = batch_size_error(config.batch_size, {"n_train": n_train}, config.dataset)
    if err is not None:
        raise err
    graph = BipartiteGraph(dataset.train, dataset.n_users, dataset.n_items, getattr(dataset, "node_order", None))
    _place_graph(graph, config)
    kernels.set_backend(config.backend)
    model, opt, row_store = _build_model(config, dataset, graph)

    steps = steps_per_epoch(config, n_train)
    eval_users = _eval_users(config, dataset)
    counts = {"n_users": dataset.n_users, "n_items": dataset.n_items, "n_train": n_train,
              "n_valid": len(dataset.valid), "n_test": len(dataset.test)}
    result = RunResult(config=config)
    result.info = {"dataset": counts, "host": host_info(), "steps_per_epoch": steps,
                   "eval_users": "all" if eval_users is None else f"sample of {len(eval_users):,} (seeded)",
                   "graph_bytes": graph.footprint(), "parameters": sum(p.numel() for p in model.parameters())}
    result.footprint = Footprint(predicted=footprint(config, counts=counts))
    return TrainingRun(config, dataset, graph, model, opt, row_store, steps, steps * config.epochs,
                eval_users, result, stopper=EarlyStopping(config.patience))


def steps_per_epoch(config, n_train: int) -> int:
    """Steps in an epoch: batches of ``config.batch_size`` over the ``n_train`` training interactions
    (the last one shorter), at most ``max_steps_per_epoch`` (every engine counts so; DistDGL's
    trainers take their share of each global batch)."""
    steps = -(-n_train // config.batch_size)
    return min(steps, config.max_steps_per_epoch) if config.max_steps_per_epoch else steps


def _build_model(config, dataset, graph) -> tuple:
    """``(model, optimizer, row store)``: the sampled mode's embedding table gets row-sparse
    updates from its row store, dense weights (NGCF) a normal optimizer."""
    model = build_model(config, dataset.n_users, dataset.n_items)
    _place_embeddings(model, config)
    row_store = None
    if config.mode == "sampled":
        dense = [p for n, p in model.named_parameters() if n != "embedding"]
        model.embedding.requires_grad_(False)
        row_store = make_row_store(config, model, graph.degree)
        opt = build_optimizer(config, dense) if dense else None
    else:
        opt = build_optimizer(config, model.parameters())
        _place_optimizer_state(opt, model, config)
    if opt is not None:
        _record_steps(opt, config)
    return model, opt, row_store


def _eval_users(config, dataset) -> Optional[np.ndarray]:
    """The seeded sample of users evaluation ranks, or None for all of them."""
    n = config.eval_users
    if n is None and dataset.n_users * dataset.n_items > FULL_RANKING_MAX_PAIRS:
        n = EVAL_SAMPLE_USERS
    if n is None:
        return None
    return np.sort(np.random.default_rng(config.seed + 1).choice(
        dataset.n_users, size=min(n, dataset.n_users), replace=False))


def _compile_kernels(run, rep) -> None:
    """Compile and warm the kernels (timed apart from training), then report the run's start."""
    result = run.result
    if kernels.uncached_kernels():   # the warm-ups below compile them (whatever the backend)
        rep.on_event("compiling", COMPILING_MESSAGE)
    with use_recorder(run.recorder):
        t_jit = time.perf_counter()
        kernels.warmup()
        result.jit_seconds = run.recorder.jit_seconds or (time.perf_counter() - t_jit)
    # the machine's load is sampled before the first step, after the middle one and after the
    # last: a run timed while other work held the cores is flagged wherever it is shown
    run.load["start"] = load_sample()
    result.info["load"] = run.load
    rep.on_start(run.config, result.info | {"footprint_predicted": result.footprint.predicted,
                                            "jit_s": result.jit_seconds})
    if run.eval_users is not None:
        rep.on_event("evaluation", f"ranking a seeded sample of {len(run.eval_users):,} users, not all "
                                   f"{run.dataset.n_users:,}")
    rep.on_event("jit", f"kernel compilation/warm-up {result.jit_seconds:.2f} s (not counted as kernel time)")


def _train_epoch(run, rep, epoch: int, step: Step) -> Optional[RunStatus]:
    """One epoch of training steps; returns diverged, cancelled or interrupted when it ends the run.
    Its seconds are the steps' own (evaluation, reporting and the store's writes are not in them)."""
    config = run.config
    run.model.train()
    batches = step.batches(run, epoch)
    t_epoch, loss_sum, ended, why = 0.0, 0.0, None, None
    for i in range(run.steps_per_epoch):  # noqa: B007 - i + 1 is the epoch's step count after the loop
        lr = _start_step(run)
        t0 = time.perf_counter()
        loss = step.step(run, batches, lr)
        dt = time.perf_counter() - t0
        halt = run.signals.signum is not None or rep.should_stop()
        t1 = time.perf_counter()
        lv, halt = step.agree(loss, halt)     # DistDGL: every trainer's loss and stop request, together
        dt += time.perf_counter() - t1
        _record_step(run, rep, epoch, lv, dt)
        loss_sum += lv
        t_epoch += dt
        why = run.divergence.update(lv)
        if why:   # nothing after a blown-up loss means anything
            ended = RunStatus.DIVERGED
            break
        if halt:   # between kernels: the step is complete
            ended = run.signals.status or RunStatus.CANCELLED
            break
    run.t_train += t_epoch
    step.end_epoch(run, epoch, ended)
    result = run.result
    result.epochs, result.steps = epoch, run.step
    result.epoch_seconds.append(t_epoch)
    rep.on_epoch(epoch, t_epoch, i + 1, loss_sum / (i + 1))
    if ended is RunStatus.DIVERGED:
        result.status = RunStatus.DIVERGED
        result.info["diverged"] = diverged_message(why, run.step, epoch, config)
        rep.on_event(RunStatus.DIVERGED, result.info["diverged"])
    elif ended:
        _note_stop(run, rep, ended, epoch)
    return ended


def _note_stop(run, rep, status: RunStatus, epoch: int) -> RunStatus:
    """Record that a signal or a cancel request ended the run (``status`` cancelled or interrupted)."""
    how = run.signals.words or "a cancel request"
    run.result.status = status
    run.result.info["stopped"] = f"{status}: stopped by {how} at step {run.step} (epoch {epoch})"
    rep.on_event(status, run.result.info["stopped"])
    return status


def _start_step(run) -> float:
    """Point the recorder at the next step and set the optimizer's learning rate; return it."""
    run.recorder.step = run.step
    lr = lr_at(run.step, run.config, run.steps_per_epoch, run.total_steps)
    for g in (run.opt.param_groups if run.opt is not None else ()):
        g["lr"] = lr
    return lr


def _full_step(run, batches):
    """Full-graph step: propagate every node's embedding, BPR on the batch, update all parameters."""
    recorder, model, opt = run.recorder, run.model, run.opt
    with recorder.in_phase("sampling"), recorder.timed("bpr_sample", pattern="gather", backend="numpy"):
        users, pos, neg = (torch.from_numpy(a) for a in next(batches))
        rows = _batch_rows(run, users, pos, neg)
    with recorder.in_phase("forward"):
        out = model.propagate(run.graph.adj) if rows is None else model.propagate(run.graph.adj, rows=rows)
    with recorder.in_phase("loss"):
        loss, _ = bpr_loss(model, out, users, pos, neg, run.config.l2, rows=rows)
    with recorder.in_phase("backward"):
        opt.zero_grad(set_to_none=True)
        loss.backward()
    with recorder.in_phase("optimizer"):
        opt.step()
    return loss


def _batch_rows(run, users, pos, neg):
    """The batch's distinct rows (``kernels.batch_rows``) when the model's result can be read at them
    (LightGCN: the last layer then propagated at those rows only) and they are at most
    ``ROWS_MAX_SHARE`` of the nodes (a large batch touches most rows: the whole layer is as cheap);
    else None."""
    if not model_spec(run.config.model).layer_mean:
        return None
    n_users, n = run.model.n_users, run.graph.n_nodes
    rows = kernels.batch_rows(n, users.numpy(), pos.numpy() + n_users, neg.numpy() + n_users)
    return rows if rows[0].shape[0] <= kernels.fused.ROWS_MAX_SHARE * n else None


def _sampled_step(run, batches, lr: float, cover):
    """Sampled step: the batch's k-hop sub-graph, its layer-0 rows fetched from the row store,
    propagated through the blocks; the rows' gradients go back to the row store."""
    recorder, model, opt, row_store, step = run.recorder, run.model, run.opt, run.row_store, run.step
    with recorder.in_phase("sampling"), recorder.timed("sample_wait", pattern="compute", backend="numpy"):
        (users, pos, neg), sub = next(batches)  # built ahead by the prefetch thread
        # the oracle plans over the next min(L, MAX_SAMPLE_AHEAD) batches (fewer only at the run's
        # end): wait for the sampler to fill its window, not for thread timing
        ahead = [s.nodes for _, s in batches.window(fill=run.config.cache_policy == "oracle")]
    recorder.record("sample_subgraph", int(sub.build_seconds * 1e9), phase="sampling", pattern="gather",
                    backend="numpy")
    _note_subgraph(run.sampled_stats, sub)
    cover.add(sub.nodes)
    rows = torch.from_numpy(sub.nodes)
    row_store.lookahead(ahead)
    with recorder.in_phase("forward"):
        x0 = row_store.fetch(step, rows).requires_grad_(True)
        out = model.propagate_blocks(sub.blocks, x0)
    with recorder.in_phase("loss"):
        si = torch.from_numpy(sub.seed_index)
        b = len(users)
        loss, _ = bpr_loss_rows(out, x0, si[:b], si[b:2 * b], si[2 * b:], run.config.l2)
    with recorder.in_phase("backward"):
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        loss.backward()
    with recorder.in_phase("optimizer"):
        row_store.update(step, rows, x0.grad, lr)
        if opt is not None:
            opt.step()
    return loss


def _record_step(run, rep, epoch: int, lv: float, seconds: float) -> None:
    """Fold the step's kernel records into the run's totals, report the step (loss ``lv``)."""
    records = run.recorder.take()
    run.totals.add(records)
    sum_records(records, store_key, into=run.tier_totals)
    step_totals = {k: t.values() for k, t in sum_records(records, store_key).items()}
    for r in records:
        run.phase_s[r.phase] = run.phase_s.get(r.phase, 0.0) + r.ns / 1e9
    if run.step == min(2, run.total_steps - 1):
        run.result.step_records = records
    run.step += 1
    run.tier_steps.append((run.step, step_totals))
    run.step_seconds[run.step] = seconds
    rep.on_step(run.step, epoch, lv, seconds, records)
    if run.step == max(1, run.total_steps // 2) and "middle" not in run.load:
        run.load["middle"] = load_sample(run.load.get("start"))
        rep.on_load(run.load)


def _evaluate_and_check_stop(run, rep, epoch: int, step: Step) -> bool:
    """Validate when due (every ``eval_every`` epochs and after the last); keep the best model's
    state; return whether early stopping ends the run (the leader's decision, taken by all)."""
    config, result, key = run.config, run.result, run.key
    if not (epoch % config.eval_every == 0 or epoch == config.epochs) or not len(run.dataset.valid):
        return False   # not due, or nothing to validate on (the paper protocol): the last model is tested
    run.evaluations += 1
    step.gather(run)
    stop = False
    if step.leader:
        m = _evaluate(run, "valid")
        result.history.append({"epoch": epoch, "step": run.step, "elapsed_s": run.t_train, **m})
        rep.on_eval(epoch, run.step, "valid", m, run.t_train)
        if config.target_recall is not None and result.time_to_target_s is None:
            target = target_outcome(result.history, config.target_recall, key, **run.target_about)
            if target["reached"]:
                result.time_to_target_s = target["time_s"]
                rep.on_event("target", target_line(target))
        stopper = run.stopper
        if stopper.update(epoch, m[key]):
            result.best_epoch, result.best_valid = epoch, m
            run.best_state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        elif stopper.should_stop(epoch):
            rep.on_event("early_stop", f"valid {key} did not improve for {epoch - stopper.best_epoch} "
                                       f"epochs; best {stopper.best:.4f} at epoch {stopper.best_epoch}")
            stop = True
    return step.decide(stop)


def _evaluate(run, split: str) -> dict:
    run.model.eval()
    with run.recorder.in_phase("evaluation"):
        m = evaluate(run.model, run.graph.adj, run.dataset, split, topk=run.config.topk, users=run.eval_users)
    run.recorder.take()  # evaluation kernels are not training-step kernels
    return m


def _test(run, step: Step) -> None:
    """Test metrics of the best validated model (the last one if none was validated), on the leader."""
    if run.evaluations == 0:
        step.gather(run)
    if not step.leader:
        return
    if run.best_state is not None:
        run.model.load_state_dict(run.best_state)
    run.result.test = _evaluate(run, "test")


def _finish(run, rep, ended: Optional[RunStatus], step: Step) -> RunResult:
    """Complete the result (times, kernels, the target reached or not, the engine's own part,
    modeled projection, peak RSS) and report it once."""
    config, result = run.config, run.result
    if result.test:
        rep.on_eval(result.best_epoch, run.step, "test", result.test, run.t_train)
    result.train_seconds = run.t_train
    result.kernels = run.totals.rows()
    if step.leader and config.target_recall is not None:
        result.target = target_outcome(result.history, config.target_recall, run.key, **run.target_about)
        result.time_to_target_s = result.target["time_s"]
        if not result.target["reached"]:
            rep.on_event("target", target_line(result.target))
    step.finish(run)
    if not config.measured:
        result.modeled = _project_run(config, result, run)
        rep.on_event("modeled", modeled_line(result))
    result.phases = run.phase_s
    result.footprint.measured["peak_rss"] = peak_rss_bytes()
    run.load["end"] = load_sample(run.load.get("middle") or run.load.get("start"))
    rep.on_load(run.load)
    rep.on_finish(result)
    return result


def _sampled_info(config, stats: dict, row_store) -> dict:
    nb = max(stats["batches"], 1)
    return {"fanouts": list(config.fanouts),
            "redundancy_per_epoch": stats["redundancy"],
            "mean_nodes_per_layer": [x / nb for x in (stats["nodes_per_layer"] or [])],
            "mean_edges_per_layer": [x / nb for x in (stats["edges_per_layer"] or [])],
            "mean_build_seconds": stats["build_seconds"] / nb,
            "row_store": row_store.stats()}


class _Coverage:
    """Sampled nodes of one epoch: how many sampled in all, how many distinct (their ratio: redundancy)."""

    def __init__(self, n_nodes: int):
        self.seen = np.zeros(n_nodes, dtype=bool)
        self.sampled = 0

    def add(self, nodes) -> None:
        self.seen[nodes] = True
        self.sampled += len(nodes)

    def redundancy(self) -> float:
        return self.sampled / max(int(self.seen.sum()), 1)


class DivergenceBound:
    """When a run has diverged: its loss is not finite, or it stayed above ``factor`` x the first
    step's loss for ``window`` consecutive steps (epochs do not reset the count).

    BPR's loss starts near ln 2 = 0.693 (plus the L2 term) and falls as a model learns; a model
    whose loss sits at 100x that for 5 steps in a row has left any useful region (an lr of 1e6
    takes the loss from 0.693 to ~1e12 in a few steps) and its metrics would only look like a
    result. A single spike that comes back under the bound is not divergence.
    """

    FACTOR = 100.0
    WINDOW = 5

    def __init__(self, factor: float = FACTOR, window: int = WINDOW):
        self.factor, self.window = float(factor), int(window)
        self.first: Optional[float] = None
        self.above = 0

    def update(self, loss: float) -> Optional[str]:
        """Take one step's loss; return why the run diverged (words), or None."""
        if not math.isfinite(loss):
            return f"loss {loss} is not finite"
        if self.first is None:
            self.first = loss
            return None
        bound = self.factor * abs(self.first)
        self.above = self.above + 1 if loss > bound else 0
        if self.above >= self.window:
            return (f"loss {loss:.4g} stayed above {self.factor:g}x the first step's loss ({self.first:.4g}) "
                    f"for {self.window} steps")
        return None


def diverged_message(why: str, step: int, epoch: int, config) -> str:
    """One line for a run ended by its divergence bound (:class:`DivergenceBound`): why, where, and
    what to change."""
    return (f"training diverged: {why}, at step {step} (epoch {epoch}); no test metrics. "
            f"Lower --lr (was {config.lr:g}), --l2 (was {config.l2:g}) or --weight-decay (was "
            f"{config.weight_decay:g}).")


def _project_run(config, result, run) -> dict:
    """Modeled per-step time of this run's measured kernels on its memory mode's device
    (:func:`gnnrec_lab.memory.tiermodel.run_step_time`, as every view computes it): from its
    per-step kernels and step seconds, as the store has them (the robust base,
    :func:`~gnnrec_lab.memory.tiermodel.step_base`); from its totals where no step was recorded."""
    import pandas as pd

    from gnnrec_lab.memory.tiermodel import RunProjection
    host = host_profile(measure_if_missing=True, quick=True)
    rows = [(*k, step, *v) for step, agg in run.tier_steps for k, v in agg.items()]
    if rows:
        df = pd.DataFrame(rows, columns=[*STORE_KEY, "step", *TOTAL_FIELDS])
    else:
        df = pd.DataFrame(totals_rows(run.tier_totals, STORE_KEY))
    return RunProjection.of_run(df, host, config, footprint=result.footprint.predicted or None,
                                steps=result.steps, step_seconds=run.step_seconds or None).to_dict()


def result_step_times(result):
    """:func:`~gnnrec_lab.memory.tiermodel.step_times` of a finished run's result: its measured step
    (training seconds over its steps), its training kernels' time per step and, for a modeled memory
    mode, its projection (``result.modeled``): the numbers the run store gives every view of it."""
    from gnnrec_lab.memory.tiermodel import mode_device, step_times, training_kernel_ns
    cfg = result.config
    dev = mode_device(memory_mode_of(cfg).name, getattr(cfg, "device_profile", None))
    return step_times(result.train_seconds, result.steps, training_kernel_ns(result.kernels), result.steps,
                      modeled=result.modeled or None, device=dev)


def modeled_line(result) -> str:
    """The run summary's line of a run's step and kernel time (CLI, the run's events): measured,
    and for a modeled memory mode modeled on its device, with the placement that assumes."""
    st = result_step_times(result)
    where = st.placement_assumption
    return (f"{result.config.memory_mode}: {st.text()}" + (f"; placement: {where}" if where else ""))


def _place_graph(graph, config) -> None:
    """Move the adjacency's index arrays (the bulk of the graph class) to ``file:DIR``."""
    where = place_of(config, "graph")
    if where.is_file:
        for a in (graph.adj,) + (() if graph.adj._local is None else (graph.adj._local[0],)):
            a.indptr = place_array(a.indptr, where, "graph")
            a.indices = place_array(a.indices, where, "graph")


def _place_embeddings(model, config) -> None:
    """Move the embedding table to its placement (a file-backed tier for ``file:DIR``)."""
    where = place_of(config, "embeddings")
    if where.is_file:
        model.embedding.data = place_tensor(model.embedding.data, where, "embeddings")


def _place_optimizer_state(opt, model, config) -> None:
    """Pre-create Adam-family moment tensors at the ``optimizer`` placement."""
    where = place_of(config, "optimizer")
    if not where.is_file or config.optimizer not in ("adam", "adamw"):
        return
    for p in model.parameters():
        opt.state[p] = {"step": torch.tensor(0.0),
                        "exp_avg": allocate(tuple(p.shape), p.dtype, where, "optimizer"),
                        "exp_avg_sq": allocate(tuple(p.shape), p.dtype, where, "optimizer")}


def _sampled_batches(graph, config, steps: int):
    """Every epoch's first ``steps`` BPR batches with their k-hop sub-graphs, epoch after epoch,
    sampled ahead in one background thread. Epoch e draws from its own generator seeded
    ``(seed, e)``, so running ahead never shifts the next epoch's draws; never past ``steps``
    per epoch (an oracle would prefetch rows nobody trains)."""
    fanouts = list(config.fanouts) if model_spec(config.model).graph else []   # mf samples no neighbours

    def gen():
        for epoch in range(1, config.epochs + 1):
            rng = np.random.default_rng((config.seed, epoch))
            for users, pos, neg in bpr_batches(graph, config.batch_size, rng, max_batches=steps,
                                                 sampler=config.sampler):
                sub = sample_subgraph(graph, batch_nodes(graph, users, pos, neg), fanouts, rng)
                yield (torch.from_numpy(users), torch.from_numpy(pos), torch.from_numpy(neg)), sub
    # the oracle's future is what the sampler has produced ahead: let it run up to `lookahead` batches
    depth = min(config.lookahead, MAX_SAMPLE_AHEAD) if config.cache_policy == "oracle" else 4
    return Prefetcher(gen(), depth=depth)


def _note_subgraph(stats, sub) -> None:
    stats["batches"] += 1
    stats["build_seconds"] += sub.build_seconds
    for key, vals in (("nodes_per_layer", sub.nodes_per_layer), ("edges_per_layer", sub.edges_per_layer)):
        cur = stats[key]
        stats[key] = list(vals) if cur is None else [a + b for a, b in zip(cur, vals)]
