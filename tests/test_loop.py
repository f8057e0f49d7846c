"""One training loop for every engine (train.run_loop with a Step): a process that does not lead
takes its steps and follows the leader's decisions without evaluating; a stop agreed at a step
ends the run there; evaluation time stays out of the training time; the target's outcome
(reached or not, and when) comes from one function, which comparisons across engines also read."""
import numpy as np
import pytest

from gnnrec_lab import RunConfig
from gnnrec_lab.training.loop import FullStep, _compile_kernels, _eval_users, _prepare, run_loop
from gnnrec_lab.training.reporting import Reporter
from gnnrec_lab.training.step import target_line, target_outcome
from gnnrec_lab.util.status import RunStatus

TINY = dict(dataset="synth-tiny", dim=16, layers=2, batch_size=512, epochs=3, lr=5e-3, patience=0,
            max_steps_per_epoch=2, eval_users=100)


class _Seen(Reporter):
    def __init__(self):
        self.steps, self.epochs, self.evals, self.events = [], [], [], []

    def on_step(self, step, epoch, loss, seconds, records):
        self.steps.append((step, epoch))

    def on_epoch(self, epoch, seconds, steps, loss):
        self.epochs.append((epoch, seconds))

    def on_eval(self, epoch, step, split, metrics, elapsed_s):
        self.evals.append((epoch, step, split, elapsed_s))

    def on_event(self, kind, message):
        self.events.append((kind, message))


def _loop(step, **cfg):
    run = _prepare(RunConfig(**TINY | cfg), None, False)
    rep = _Seen()
    _compile_kernels(run, Reporter())
    return run_loop(run, rep, step), rep


def test_a_follower_steps_and_follows_the_leaders_stop_without_evaluating():
    class Follower(FullStep):
        leader = False
        decided = []

        def decide(self, stop):
            self.decided.append(stop)
            return len(self.decided) == 2     # the leader stops after its second evaluation
    step = Follower()
    r, rep = _loop(step, epochs=5)
    assert step.decided == [False, False]    # a follower never decides to stop itself
    assert r.epochs == 2 and r.steps == 4 and rep.steps == [(1, 1), (2, 1), (3, 2), (4, 2)]
    assert r.history == [] and r.test == {} and rep.evals == [] and r.best_epoch == -1


def test_a_stop_agreed_at_a_step_ends_the_run_there_as_cancelled():
    class Halted(FullStep):
        n = 0

        def agree(self, loss, halt):
            self.n += 1
            return super().agree(loss, halt or self.n == 3)   # another trainer was asked to stop
    r, rep = _loop(Halted(), epochs=5)
    assert r.status == RunStatus.CANCELLED and r.steps == 3 and r.epochs == 2
    assert [k for k, _ in rep.events].count(RunStatus.CANCELLED) == 1


def test_the_runs_sampler_draws_its_batches():
    from gnnrec_lab.graph.sampling import bpr_batches
    runs = {s: _prepare(RunConfig(**TINY | dict(sampler=s)), None, False) for s in ("interactions", "users")}
    first = {s: next(iter(FullStep().batches(run, 1))) for s, run in runs.items()}
    for s, run in runs.items():
        want = next(bpr_batches(run.graph, 512, np.random.default_rng((run.config.seed, 1)),
                                max_batches=run.steps_per_epoch, sampler=s))
        for got, exp in zip(first[s], want):
            np.testing.assert_array_equal(got, exp)
    assert not np.array_equal(first["users"][0], first["interactions"][0])


def test_evaluations_every_epoch_with_training_time_only():
    r, rep = _loop(FullStep(), target_recall=1.0)
    assert [h["epoch"] for h in r.history] == [1, 2, 3]
    # each evaluation's elapsed time is the training steps' time so far: evaluation is not in it
    assert [h["elapsed_s"] for h in r.history] == pytest.approx(list(np.cumsum(r.epoch_seconds)))
    assert r.train_seconds == pytest.approx(sum(r.epoch_seconds))
    # a target never reached says so, in the result and in the run's events
    assert r.target["reached"] is False and r.time_to_target_s is None and r.target["evaluations"] == 3
    assert r.to_dict()["target"] == r.target
    assert ("target", target_line(r.target)) in rep.events and "not reached" in target_line(r.target)


def test_eval_users_are_one_seeded_sample_for_every_engine():
    from gnnrec_lab import data
    from gnnrec_lab.distributed.spec import DistSpec
    ds = data.load("synth-tiny")
    spec = DistSpec(workdir="/nonexistent", graph_name="g", partitions=2, dataset="synth-tiny", layers=2, dim=16,
                    fanouts=[10, 10], batch_size=512, eval_users=100, seed=7)
    full = RunConfig(**TINY | dict(seed=7))
    assert np.array_equal(_eval_users(spec.run_config(), ds), _eval_users(full, ds))
    assert not np.array_equal(_eval_users(spec.run_config(), ds), _eval_users(full.replace(seed=8), ds))


H = [{"epoch": 1, "step": 10, "elapsed_s": 4.0, "recall@20": 0.10},
     {"epoch": 2, "step": 20, "elapsed_s": 8.5, "recall@20": 0.19},
     {"epoch": 3, "step": 30, "elapsed_s": 13.0, "recall@20": 0.18}]


def test_target_outcome_reached_not_reached_and_none():
    t = target_outcome(H, 0.19)
    assert t["reached"] and (t["time_s"], t["epoch"], t["step"]) == (8.5, 2, 20) and t["best"] == 0.19
    assert "reached after 8.5 s" in target_line(t) and "epoch 2" in target_line(t)
    miss = target_outcome(H, 0.2, of_run=4, fraction=0.95, reference=0.2105)
    assert not miss["reached"] and miss["time_s"] is None and miss["of_run"] == 4
    line = target_line(miss)
    assert "not reached" in line and "95% of run 4's best 0.2105" in line and "best 0.1900" in line
    assert target_outcome(H, None) == {} and target_line({}) == "no target set"
    assert target_outcome([{"epoch": 1, "step": 1, "elapsed_s": 1.0, "recall@20": float("nan")}], 0.1)["reached"] \
        is False


def test_comparison_frame_measures_both_engines_against_one_common_target():
    from gnnrec_lab.services.comparison import comparison_frame
    cfg = dict(dataset="d", model="lightgcn", layers=2, batch_size=1024, seed=1, eval_users=100)
    full = {"config": {**cfg, "mode": "full"}, "best_valid": {"recall@20": 0.2}, "history": H,
            "epoch_seconds": [4.0]}
    dist = {"engine": "distdgl", "config": {**cfg, "mode": "sampled"}, "best_valid": {"recall@20": 0.19},
            "history": [{**h, "elapsed_s": 2 * h["elapsed_s"]} for h in H], "epoch_seconds": [8.0]}
    slow = {**dist, "history": H[:1]}
    other = {"config": {**cfg, "layers": 3, "mode": "full"}, "best_valid": {"recall@20": 0.5}, "history": H}
    df = comparison_frame(results=[full, dist, slow, other], target_fraction=0.9)
    # the reference is the full-graph run at the same depth and batch size; 0.9 x 0.2 = 0.18
    assert list(df["common_target"][:3]) == pytest.approx([0.18] * 3)
    assert list(df["common_target_reached"][:3]) == [True, True, False]
    assert list(df["time_to_common_target_s"][:2]) == [8.5, 17.0] and df["time_to_common_target_s"].isna()[2]
    assert df["common_target"][3] == pytest.approx(0.45) and not df["common_target_reached"][3]


def test_reference_target_is_a_share_of_a_finished_full_graph_runs_best(store):
    """--target-of RUN_ID (services.comparison.reference_target): the share of a finished
    full-graph run's best validation Recall@20, for a run of the same reference fields only."""
    from gnnrec_lab.services.comparison import reference_target
    from gnnrec_lab.util.errors import UserError
    full = RunConfig(**TINY)
    rid = store.add_run(full, status=RunStatus.RUNNING)
    store.record_result(rid, {"config": full.to_dict(), "best_valid": {"recall@20": 0.2}})
    with pytest.raises(UserError, match=f"--target-of: run {rid} is running, not finished"):
        reference_target(store, rid, full, 0.9)
    store.set_status(rid, RunStatus.FINISHED)
    dist = full.replace(mode="sampled", fanouts=(10, 10))
    t = reference_target(store, rid, dist, 0.9)
    assert t == {"target_recall": pytest.approx(0.18), "target_of": rid, "target_fraction": 0.9,
                 "target_reference": 0.2}
    with pytest.raises(UserError, match="has layers 2, this run --layers 1"):
        reference_target(store, rid, dist.replace(layers=1, fanouts=(10,)), 0.9)
    sampled = store.add_run(dist, status=RunStatus.RUNNING)
    store.record_result(sampled, {"config": dist.to_dict(), "best_valid": {"recall@20": 0.2}})
    store.set_status(sampled, RunStatus.FINISHED)
    with pytest.raises(UserError, match="is a sampled run"):
        reference_target(store, sampled, dist, 0.9)
    with pytest.raises(UserError, match=f"^--target-of: run {sampled + 1}: no such run"):
        reference_target(store, sampled + 1, dist, 0.9)
