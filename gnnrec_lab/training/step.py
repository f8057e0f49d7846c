"""The interface between the lab's training loop (:func:`gnnrec_lab.training.loop.run_loop`) and the
engine that takes its steps (:class:`Step`), and the loop's one computation of a run's time to
target (:func:`target_outcome`, :func:`target_line`).

Light on purpose (no numpy, no torch): DistDGL's launcher, servers and machines import the module
that defines its step, and the Compare page computes targets from stored histories.
"""
from __future__ import annotations

from typing import Optional

from gnnrec_lab.util.status import RunStatus


class Step:
    """How one training step is taken, and what :func:`run_loop` needs from the engine taking it.

    A context manager around the whole loop (a sampler thread lives that long). ``leader``: this
    process evaluates, decides early stopping and reports (DistDGL: trainer 0; the other trainers
    run the same loop, take their steps and follow the leader's decisions through :meth:`agree`
    and :meth:`decide`, so every trainer leaves the loop at the same step)."""

    leader = True

    def __enter__(self) -> "Step":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def batches(self, run, epoch: int):
        """The epoch's source of batches, passed to every :meth:`step` of the epoch."""
        raise NotImplementedError

    def step(self, run, batches, lr: float):
        """One training step (sampling to the parameter update); returns its loss."""
        raise NotImplementedError

    def agree(self, loss, halt: bool) -> tuple:
        """``(loss, halt)`` as every process of the run sees them: the step's loss (a float, what
        the divergence bound reads) and whether a signal or cancel request ends the run here."""
        return float(loss.detach() if hasattr(loss, "detach") else loss), bool(halt)

    def end_epoch(self, run, epoch: int, ended: Optional[RunStatus]) -> None:
        """After the epoch's last step (``ended``: the status ending the run, if any)."""

    def gather(self, run) -> None:
        """Make ``run.model`` the whole current model on the leader, for evaluation (every process
        of the run calls it at the same point)."""

    def decide(self, stop: bool) -> bool:
        """The leader's early-stopping decision, as every process of the run takes it."""
        return stop

    def finish(self, run) -> None:
        """The engine's part of the finished result (before it is reported)."""


def target_outcome(history: list, value: Optional[float], key: str = "recall@20", **about) -> dict:
    """Whether validation ``key`` reached ``value`` in ``history`` (a run's evaluations in order:
    epoch, step, ``elapsed_s`` of training, metrics), and at which evaluation first: its training
    seconds (evaluation time excluded), epoch and step. ``about`` says where ``value`` came from
    (``of_run``, ``fraction``, ``reference``: a stated fraction of a reference run's best). ``{}``
    without a target. The one computation of a run's time to target: the loop (live and in the
    result, hence the JSON and the store) and comparisons across engines all read it."""
    if value is None:
        return {}
    hit = next((h for h in history if h.get(key, float("-inf")) >= value), None)
    return {"metric": key, "value": float(value), **about, "reached": hit is not None,
            "time_s": None if hit is None else float(hit["elapsed_s"]),
            "epoch": None if hit is None else int(hit["epoch"]), "step": None if hit is None else int(hit["step"]),
            "evaluations": len(history),
            "best": max((h[key] for h in history if key in h), default=None)}


def target_line(target: dict) -> str:
    """One line for a :func:`target_outcome` (the CLI, the run's events): reached when, or not reached."""
    if not target:
        return "no target set"
    what = f"valid {target['metric']} >= {target['value']:.4f}"
    if target.get("of_run") is not None:
        what += (f" ({target['fraction'] * 100:g}% of run {target['of_run']}'s best {target['reference']:.4f})")
    if target["reached"]:
        return (f"{what} reached after {target['time_s']:.1f} s of training (epoch {target['epoch']}, "
                f"step {target['step']})")
    best = target.get("best")
    return (f"{what}: not reached ({target['evaluations']} evaluations"
            + (f", best {best:.4f}" if best is not None else "") + ")")
