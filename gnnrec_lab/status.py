"""What state a run is in: the lab's one spelling of run status.

A ``StrEnum`` so it is stored in SQLite and JSON as its plain value and compares
equal to the strings older stores hold.
"""
from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"        # a cancel request or SIGTERM
    INTERRUPTED = "interrupted"    # Ctrl-C (SIGINT)
    OOM = "oom"                    # killed by the memory limit
    DIVERGED = "diverged"          # the loss left train.DivergenceBound

    @property
    def is_terminal(self) -> bool:
        """The run has ended and will not change status again."""
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)

    @property
    def is_active(self) -> bool:
        """Queued or running: a worker may still write to it."""
        return not self.is_terminal

    @property
    def is_failure(self) -> bool:
        """Ended without finishing of its own accord and not by the user's request."""
        return self in (RunStatus.FAILED, RunStatus.OOM, RunStatus.DIVERGED)
