"""How a run ends on a signal: SIGINT (Ctrl-C) and SIGTERM become a flag the training loop checks.

Python runs a signal handler between bytecodes; when that moment falls inside a numba kernel the
exception it raises is set while the kernel returns a value, and CPython turns that into
``SystemError: CPUDispatcher(...) returned a result with an exception set`` (the run then ends
``failed`` with a raw traceback). While :class:`StopSignals` is active the handlers only record
the signal; the training loop reads :attr:`StopSignals.signum` between steps (after the kernels of
one step, before the next) and ends the run with the signal's status:

* SIGINT (Ctrl-C): ``interrupted`` (the CLI exits 130);
* SIGTERM (``runs cancel`` after its grace period, a service manager, ``kill``): ``cancelled``.

A second signal of the same run raises at once (KeyboardInterrupt / :class:`Terminated`): a
person pressing Ctrl-C twice wants out now, even mid-step.
"""
from __future__ import annotations

import signal
import sys
import threading
from typing import Optional

from gnnrec_lab.util.status import RunStatus

SIGNAL_STATUS = {signal.SIGINT: RunStatus.INTERRUPTED, signal.SIGTERM: RunStatus.CANCELLED}
SIGNAL_WORDS = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
EXIT_INTERRUPTED = 130   # 128 + SIGINT, what shells report for Ctrl-C
EXIT_TERMINATED = 143    # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived (a second time, or outside a training loop). BaseException so training code
    cannot swallow it."""


class StopSignals:
    """Context manager: SIGINT/SIGTERM set :attr:`signum` instead of raising. Only the main thread
    can install handlers; elsewhere (a notebook's worker thread) it does nothing."""

    def __init__(self):
        self.signum: Optional[int] = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.signum is not None:   # the second one: stop now
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
        self.signum = signum
        if signum == signal.SIGINT and sys.stderr is not None and sys.stderr.isatty():
            # a person at a terminal: say why nothing stops at once, and how to force it
            print("\ngnnrec-lab: stopping after the current step (Ctrl-C again to stop at once)",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNAL_STATUS:
                previous = signal.getsignal(s)
                if previous is signal.SIG_IGN:   # ignored on purpose (nohup, a background job): keep it so
                    continue
                self._previous[s] = previous
                signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            # None: a handler installed outside Python, which cannot be put back; the default then
            signal.signal(s, signal.SIG_DFL if h is None else h)
        self._previous.clear()

    @property
    def status(self) -> Optional[RunStatus]:
        """The status a run stopped by the recorded signal ends with (None: no signal)."""
        return SIGNAL_STATUS.get(self.signum)

    @property
    def words(self) -> str:
        return SIGNAL_WORDS.get(self.signum, "")


def signal_cause(exc: BaseException) -> Optional[BaseException]:
    """The KeyboardInterrupt or Terminated behind ``exc`` (itself, or the exception a ``SystemError``
    from a compiled kernel carries as its cause), else None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, (KeyboardInterrupt, Terminated)):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


__all__ = ["StopSignals", "Terminated", "signal_cause", "SIGNAL_STATUS", "EXIT_INTERRUPTED", "EXIT_TERMINATED"]
