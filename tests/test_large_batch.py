"""Large-batch techniques: LAMB's update against a hand computation, the learning
rate the optimizer actually holds during a run (scaling rule, warm-up, schedule),
and time-to-accuracy recorded only when the target is reached."""
import math

import pytest
import torch

import gnnrec_lab.training.loop as train_mod
from gnnrec_lab import RunConfig, run
from gnnrec_lab.models.optim import LAMB, build_optimizer, lr_at

TINY = dict(dataset="synth-tiny", dim=8, layers=1, batch_size=512, epochs=2, lr=1e-2, patience=0)


# ---------------------------------------------------------------------------
# LAMB
# ---------------------------------------------------------------------------
def _lamb_by_hand(p, grads, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.0):
    """LAMB (You et al. 2020, Alg. 2) on a list of floats, one tensor = one layer."""
    p = list(p)
    m = [0.0] * len(p)
    v = [0.0] * len(p)
    for t, g in enumerate(grads, start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g)]
        r = [(mi / (1 - b1 ** t)) / (math.sqrt(vi / (1 - b2 ** t)) + eps) + wd * pi
             for mi, vi, pi in zip(m, v, p)]
        pn = math.sqrt(sum(x * x for x in p))
        rn = math.sqrt(sum(x * x for x in r))
        trust = pn / rn if pn > 0 and rn > 0 else 1.0
        p = [pi - lr * trust * ri for pi, ri in zip(p, r)]
    return p


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lamb_matches_hand_computed_steps(wd):
    p0 = [0.5, -1.0, 2.0]
    grads = [[0.1, 0.2, -0.3], [-0.05, 0.4, 0.01], [0.3, -0.1, 0.2]]
    p = torch.tensor(p0, dtype=torch.float64, requires_grad=True)
    opt = LAMB([p], lr=0.01, weight_decay=wd)
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    expect = _lamb_by_hand(p0, grads, lr=0.01, wd=wd)
    assert p.detach().tolist() == pytest.approx(expect, rel=1e-12, abs=1e-14)


def test_lamb_first_step_moves_each_layer_by_lr_times_its_norm():
    # Step 1: r = g/(|g|+eps) elementwise (~sign(g)), trust = ||p||/||r|| so the
    # update norm is lr*||p|| for every layer, whatever the gradient scale.
    a = torch.tensor([3.0, 4.0], requires_grad=True)          # ||a|| = 5
    b = torch.tensor([0.01, 0.0, 0.0, 0.0], requires_grad=True)  # ||b|| = 0.01
    opt = LAMB([a, b], lr=0.1)
    a.grad = torch.tensor([1e3, -2e3])
    b.grad = torch.tensor([1e-4, 1e-4, -1e-4, 1e-4])
    a0, b0 = a.detach().clone(), b.detach().clone()
    opt.step()
    assert (a.detach() - a0).norm().item() == pytest.approx(0.1 * 5.0, rel=1e-4)
    assert (b.detach() - b0).norm().item() == pytest.approx(0.1 * 0.01, rel=1e-3)


def test_lamb_zero_parameter_uses_trust_one():
    p = torch.zeros(3, requires_grad=True)
    opt = LAMB([p], lr=0.5)
    p.grad = torch.tensor([1.0, -1.0, 2.0])
    opt.step()
    # ||p|| = 0: trust ratio 1, plain Adam-like first step of lr * ~sign(g)
    assert p.detach().tolist() == pytest.approx([-0.5, 0.5, -0.5], rel=1e-5)


# ---------------------------------------------------------------------------
# learning rate: rule, warm-up, schedule
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("rule,expect", [("none", 1e-3), ("linear", 8e-3), ("sqrt", 1e-3 * 8 ** 0.5)])
def test_lr_rules_scale_from_reference_batch(rule, expect):
    c = RunConfig(batch_size=16384, ref_batch_size=2048, lr=1e-3, lr_rule=rule)
    assert c.effective_lr == pytest.approx(expect)
    opt = build_optimizer(c, [torch.zeros(2, requires_grad=True)])
    assert opt.param_groups[0]["lr"] == pytest.approx(expect)


def test_lr_at_warmup_then_cosine():
    c = RunConfig(lr=0.1, warmup_steps=4, schedule="cosine")
    lrs = [lr_at(s, c, steps_per_epoch=5, total_steps=14) for s in range(14)]
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert lrs[4] == pytest.approx(0.1)                      # cosine starts at the base
    assert lrs[9] == pytest.approx(0.05)                     # half-way through the 10 post-warm-up steps
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))     # monotone decay


def test_lr_at_warmup_epochs_and_step_schedule():
    c = RunConfig(lr=1.0, warmup_epochs=0.5, schedule="step")
    lrs = [lr_at(s, c, steps_per_epoch=4, total_steps=10) for s in range(10)]
    # 0.5 epochs of 4 steps = 2 warm-up steps, then /10 at 50 % and 75 % of the remaining 8
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.1, 0.01, 0.01])


class _LrSpy:
    """Wraps the run's optimizer and notes the lr of every param group at each step()."""

    def __init__(self, opt, seen):
        self.opt, self.seen = opt, seen

    def __getattr__(self, name):
        return getattr(self.opt, name)

    def step(self, closure=None):
        self.seen.append(([g["lr"] for g in self.opt.param_groups], type(self.opt).__name__))
        return self.opt.step(closure)


@pytest.mark.parametrize("optimizer", ["lamb", "sgd", "adamw"])
def test_run_applies_rule_and_warmup_to_param_groups(monkeypatch, optimizer):
    seen = []
    real = train_mod.build_optimizer
    monkeypatch.setattr(train_mod, "build_optimizer", lambda c, params: _LrSpy(real(c, params), seen))
    c = RunConfig(**TINY | dict(batch_size=1024, ref_batch_size=256, lr=1e-2, lr_rule="sqrt",
                                warmup_steps=3, optimizer=optimizer, max_steps_per_epoch=3))
    r = run(c)
    assert r.status == "finished" and r.steps == 6
    base = 1e-2 * 2.0  # sqrt(1024 / 256)
    expect = [base / 3, 2 * base / 3, base, base, base, base]
    assert [lrs[0] for lrs, _ in seen] == pytest.approx(expect)
    assert all(len(set(lrs)) == 1 for lrs, _ in seen)        # every group gets the same lr
    assert {name for _, name in seen} == {{"lamb": "LAMB", "sgd": "SGD", "adamw": "AdamW"}[optimizer]}


# ---------------------------------------------------------------------------
# time to accuracy
# ---------------------------------------------------------------------------
def test_time_to_target_recorded_at_first_evaluation_reaching_it():
    r0 = run(RunConfig(**TINY | dict(epochs=3)))
    r20 = [h["recall@20"] for h in r0.history]
    target = min(r20) * 0.999  # the first evaluation already reaches it
    r = run(RunConfig(**TINY | dict(epochs=3, target_recall=target)))
    assert r.time_to_target_s is not None
    assert r.time_to_target_s == pytest.approx(r.history[0]["elapsed_s"])
    assert 0 < r.time_to_target_s <= r.train_seconds


def test_time_to_target_later_evaluation():
    r0 = run(RunConfig(**TINY | dict(epochs=3)))
    r20 = [h["recall@20"] for h in r0.history]
    if not r20[-1] > max(r20[:-1]):
        pytest.skip(f"tiny run did not improve at its last evaluation: {r20}")
    r = run(RunConfig(**TINY | dict(epochs=3, target_recall=(max(r20[:-1]) + r20[-1]) / 2)))
    assert r.time_to_target_s == pytest.approx(r.history[-1]["elapsed_s"])
    assert r.time_to_target_s > r.history[0]["elapsed_s"]


def test_time_to_target_none_when_not_reached():
    r = run(RunConfig(**TINY | dict(epochs=1, target_recall=1.0)))
    assert r.time_to_target_s is None
    assert r.to_dict()["time_to_target_s"] is None
