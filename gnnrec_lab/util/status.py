"""What state a run is in: the lab's one spelling of run status.

A ``StrEnum`` so it is stored in SQLite and JSON as its plain value and compares
equal to the strings older stores hold.

Every status is either *active* (queued, running: a worker may still write to the run) or
*terminal*; a terminal one is exactly one of finished, a *failure* (failed, oom, diverged) or
*stopped* on request (cancelled, interrupted). A *crash* (failed, oom) is the failure the
training loop did not decide itself: an exception or a kill, whose stderr says why; the other
terminal statuses are what a training function's result reports.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Optional


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"        # a cancel request or SIGTERM
    INTERRUPTED = "interrupted"    # Ctrl-C (SIGINT)
    OOM = "oom"                    # killed by the memory limit
    DIVERGED = "diverged"          # the loss left train.DivergenceBound

    @classmethod
    def of(cls, value) -> Optional["RunStatus"]:
        """``value`` (a member or its plain string) as a RunStatus; None for anything else
        (the dashboard's ``"none"``/``"unknown"`` placeholders, a run that vanished)."""
        try:
            return cls(value)
        except ValueError:
            return None

    @classmethod
    def active(cls, value) -> bool:
        """``value`` is a queued or running status; False for anything else (None, a placeholder,
        a string no member spells), where ``RunStatus(value).is_active`` would raise."""
        st = cls.of(value)
        return st is not None and st.is_active

    @classmethod
    def failure(cls, value) -> bool:
        """``value`` is a failed status (:attr:`is_failure`); False for anything else."""
        st = cls.of(value)
        return st is not None and st.is_failure

    @property
    def is_terminal(self) -> bool:
        """The run has ended and will not change status again (the store stamps ``finished``)."""
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)

    @property
    def is_active(self) -> bool:
        """Queued or running: a worker may still write to it."""
        return not self.is_terminal

    @property
    def is_failure(self) -> bool:
        """Ended without finishing of its own accord and not by the user's request."""
        return self in (RunStatus.FAILED, RunStatus.OOM, RunStatus.DIVERGED)

    @property
    def is_stopped(self) -> bool:
        """Ended early by a request: a cancel, SIGTERM or Ctrl-C."""
        return self in (RunStatus.CANCELLED, RunStatus.INTERRUPTED)

    @property
    def is_crash(self) -> bool:
        """A failure the training loop did not decide (an exception or a kill): its stderr says why."""
        return self in (RunStatus.FAILED, RunStatus.OOM)
