"""RunStatus: every status classified once, and the classes are what the store, runner and worker act on."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.runs.runner import Runner
from gnnrec_lab.runs.store import Store
from gnnrec_lab.runs.worker import EXIT_DIVERGED, EXIT_OK, exit_status, finish_run
from gnnrec_lab.services.sweep import PointState
from gnnrec_lab.util.signals import EXIT_INTERRUPTED
from gnnrec_lab.util.status import RunStatus

ACTIVE = {RunStatus.QUEUED, RunStatus.RUNNING}
FAILURES = {RunStatus.FAILED, RunStatus.OOM, RunStatus.DIVERGED}
STOPPED = {RunStatus.CANCELLED, RunStatus.INTERRUPTED}
CRASHES = {RunStatus.FAILED, RunStatus.OOM}
# how train()'s loop can end (RunResult.status); failed and oom come from an exception or a kill
LOOP_ENDINGS = {RunStatus.FINISHED, RunStatus.CANCELLED, RunStatus.INTERRUPTED, RunStatus.DIVERGED}


@pytest.mark.parametrize("st", list(RunStatus))
def test_every_status_is_in_exactly_one_class(st):
    classes = [st.is_active, st is RunStatus.FINISHED, st.is_failure, st.is_stopped]
    assert sum(classes) == 1, st
    assert st.is_terminal is not st.is_active
    assert not st.is_crash or st.is_failure     # a crash is a failure the loop did not decide


def test_the_classes_are_the_lab_s_sets():
    assert {s for s in RunStatus if s.is_active} == ACTIVE
    assert {s for s in RunStatus if s.is_terminal} == set(RunStatus) - ACTIVE
    assert {s for s in RunStatus if s.is_failure} == FAILURES
    assert {s for s in RunStatus if s.is_stopped} == STOPPED
    assert {s for s in RunStatus if s.is_crash} == CRASHES


def test_values_are_plain_strings_and_of_tolerates_placeholders():
    assert [s.value for s in RunStatus] == ["queued", "running", "finished", "failed", "cancelled",
                                           "interrupted", "oom", "diverged"]
    for s in RunStatus:
        assert s == s.value and RunStatus(s.value) is s and RunStatus.of(s.value) is s and RunStatus.of(s) is s
        assert f"{s}" == str(s) == s.value and json.dumps({"status": s}) == f'{{"status": "{s.value}"}}'
    # the dashboard's placeholders and a vanished run are not statuses
    assert RunStatus.of("none") is None and RunStatus.of("unknown") is None and RunStatus.of(None) is None
    for v in ("none", "unknown", None, "Running", 3):
        assert not RunStatus.active(v) and not RunStatus.failure(v)
    assert [s for s in RunStatus if RunStatus.active(s.value)] == [s for s in RunStatus if s.is_active]
    assert [s for s in RunStatus if RunStatus.failure(s)] == [s for s in RunStatus if s.is_failure]
    # a sweep point without a run has its own states, none of them a run status
    assert not {p.value for p in PointState} & {s.value for s in RunStatus}


def test_store_stamps_finished_exactly_for_terminal_statuses(tmp_path):
    store = Store(tmp_path)
    for st in RunStatus:
        rid = store.add_run(RunConfig(name=str(st)), status=RunStatus.QUEUED)
        assert store.set_status(rid, st.value)          # plain strings are accepted too
        run = store.get_run(rid)
        assert run["status"] is st and store.status(rid) is st   # read back as the enum
        assert (run["finished"] is not None) is st.is_terminal, st
        assert (run["started"] is not None) is (st is RunStatus.RUNNING), st
    with pytest.raises(ValueError, match=r"status must be one of \('queued', 'running', 'finished', 'failed', "
                                         r"'cancelled', 'interrupted', 'oom', 'diverged'\), got 'done'"):
        store.add_run(RunConfig(), status="done")


def test_runner_treats_terminal_statuses_as_ended(tmp_path):
    store = Store(tmp_path)
    runner = Runner(store, pick_up=False)
    for st in RunStatus:
        if not st.is_terminal:
            continue
        rid = store.add_run(RunConfig(name=str(st)), status=RunStatus.RUNNING)
        store.set_status(rid, st)
        # an ended run is left as it is: no cancel flag raised, its status returned at once
        assert runner.cancel(rid, grace_s=0) is st and not store.get_run(rid)["cancel_requested"]
        assert runner.wait(rid, timeout=1) is st
    queued = store.add_run(RunConfig(name="queued"))
    assert store.request_cancel(queued) is RunStatus.CANCELLED and store.status(queued).is_terminal
    runner.close()


def test_worker_exit_status_and_result_statuses(tmp_path):
    assert {s: exit_status(s) for s in RunStatus} == {
        **{s: EXIT_OK for s in RunStatus}, RunStatus.DIVERGED: EXIT_DIVERGED,
        RunStatus.INTERRUPTED: EXIT_INTERRUPTED}
    store = Store(tmp_path)
    # what a training function's result may report is how its loop ended; anything else counts as finished
    for reported in [*RunStatus, "not a status"]:
        rid = store.add_run(RunConfig(name=str(reported)), status=RunStatus.RUNNING)
        result = SimpleNamespace(status=reported, info={}, to_dict=lambda: {})
        got = finish_run(store, rid, result)
        expected = reported if reported in LOOP_ENDINGS else RunStatus.FINISHED
        assert got is expected and store.status(rid) is expected, reported
