"""How a training run tells the outside world what it is doing.

``train()`` calls these methods at visible points of its loop. The default
:class:`Reporter` does nothing; the run store's reporter persists everything,
the CLI's (:class:`ProgressReporter`) prints progress. Several reporters can be combined with
:class:`MultiReporter`.
"""
from __future__ import annotations

import sys

from gnnrec_lab.util.formatting import fmt_duration


class Reporter:
    def on_start(self, config, info: dict) -> None:
        """Run begins. ``info``: dataset counts, host, predicted footprint (bytes by class)."""

    def on_step(self, step: int, epoch: int, loss: float, seconds: float, records: list) -> None:
        """One training step finished; ``records`` are its KernelRecords (measured)."""

    def on_epoch(self, epoch: int, seconds: float, steps: int, loss: float) -> None:
        """One epoch finished (``seconds`` of training time, evaluation excluded)."""

    def on_eval(self, epoch: int, step: int, split: str, metrics: dict, elapsed_s: float) -> None:
        """Evaluation on ``split`` ('valid' or 'test'); ``elapsed_s`` since training began."""

    def on_event(self, kind: str, message: str) -> None:
        """Anything worth a line: early stop, target reached, jit compile time, warnings."""

    def on_load(self, load: dict) -> None:
        """The machine's load so far: ``{point: proc.load_sample()}`` for the points sampled
        (``start``, ``middle``, ``end``; measured)."""

    def on_finish(self, result) -> None:
        """Run finished; ``result`` is a :class:`~gnnrec_lab.training.loop.RunResult`."""

    def should_stop(self) -> bool:
        """Polled once per step; True asks the loop to stop cleanly (cancel)."""
        return False


class MultiReporter(Reporter):
    def __init__(self, *reporters: Reporter):
        self.reporters = [r for r in reporters if r is not None]

    def _each(self, name, *a):
        for r in self.reporters:
            getattr(r, name)(*a)

    def on_start(self, *a): self._each("on_start", *a)
    def on_step(self, *a): self._each("on_step", *a)
    def on_epoch(self, *a): self._each("on_epoch", *a)
    def on_eval(self, *a): self._each("on_eval", *a)
    def on_event(self, *a): self._each("on_event", *a)
    def on_load(self, *a): self._each("on_load", *a)
    def on_finish(self, *a): self._each("on_finish", *a)

    def should_stop(self) -> bool:
        return any(r.should_stop() for r in self.reporters)


#: Seconds between redraws of the progress bar when stderr is not a terminal (a log file, a pipe):
#: there each redraw is one more carriage-return fragment in the file, not an update in place.
NON_TTY_INTERVAL_S = 5.0


def bar_interval(stream=None) -> float:
    """tqdm's ``mininterval`` for a bar on ``stream`` (stderr by default): tqdm's own 0.1 s on a
    terminal, :data:`NON_TTY_INTERVAL_S` elsewhere."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        tty = False
    return 0.1 if tty else NON_TTY_INTERVAL_S


class ProgressReporter(Reporter):
    """tqdm bar per epoch and one line per validation, on stderr. The test metrics are the caller's
    to print (``gnnrec-lab run`` prints them once, in its summary). Off a terminal the bar redraws
    at most every :data:`NON_TTY_INTERVAL_S` seconds."""

    def __init__(self):
        self.bar = None
        self.config = None

    def on_start(self, config, info):
        self.config = config
        self.steps = info["steps_per_epoch"]
        d = info["dataset"]
        _say(f"{config.model} layers={config.layers} dim={config.dim} batch={config.batch_size} on "
             f"{config.dataset}: {d['n_users']:,} users, {d['n_items']:,} items, {d['n_train']:,} train "
             f"interactions, {self.steps} steps/epoch, backend={config.backend}")

    def on_step(self, step, epoch, loss, seconds, records):
        from tqdm.auto import tqdm
        if self.bar is None:
            self.bar = tqdm(total=self.steps, desc=f"epoch {epoch}", leave=False, unit="step", file=sys.stderr,
                            mininterval=bar_interval(sys.stderr))
        # the postfix is drawn with the next update (refresh=True would redraw on every step,
        # past mininterval)
        self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        self.bar.update(1)

    def on_epoch(self, epoch, seconds, steps, loss):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self._last = (epoch, seconds, loss)

    def on_eval(self, epoch, step, split, metrics, elapsed_s):
        if split != "valid":   # the test metrics: printed once, by the caller (the run's summary)
            return
        from gnnrec_lab.training.evaluate import format_metrics
        e, s, loss = self._last
        _say(f"epoch {e:3d}  loss {loss:.4f}  {fmt_duration(s):>8}  valid {format_metrics(metrics)}")

    def on_event(self, kind, message):
        _say(f"[{kind}] {message}")


def _say(msg):
    from tqdm.auto import tqdm
    tqdm.write(msg, file=sys.stderr)
