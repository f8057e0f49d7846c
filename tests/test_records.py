"""Where a number came from (Provenance) and the kernel totals (KernelTotals), as types."""
from __future__ import annotations

import json
from collections import namedtuple

import pandas as pd
import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.memory.footprint import Footprint
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.provenance import Provenance, part, parts
from gnnrec_lab.util.recorder import (
    RECORD_FIELDS,
    STORE_KEY,
    SUMMED_FIELDS,
    TOTAL_FIELDS,
    KernelRecord,
    KernelTotals,
    Recorder,
    records_frame,
    store_key,
    sum_records,
    totals_rows,
)


def rec(name, ns, layer=0, phase="forward", pattern="gather", row_bytes=64, **kw):
    return KernelRecord(name, phase, layer, 0, ns, 10, 20, 30, pattern, row_bytes, 5, "native", **kw)


def test_provenance_is_its_plain_string_everywhere_it_leaves():
    assert Provenance.MODELED == "modeled" and json.dumps({"k": Provenance.MEASURED}) == '{"k": "measured"}'
    assert f"{Provenance.COUNTED}" == "counted" and str(Provenance.MODELED) == "modeled"
    assert Provenance("predicted") is Provenance.MODELED          # the spelling of stores before schema 4
    assert Provenance.of(True) is Provenance.MEASURED and Provenance.of(False) is Provenance.MODELED
    with pytest.raises(ValueError):
        Provenance("guessed")


def test_parts_read_the_provenance_each_field_declares():
    from dataclasses import dataclass, field

    @dataclass
    class Inner:
        a: int = part(Provenance.MEASURED, default=0)

    @dataclass
    class Outer:
        x: float = part(Provenance.MODELED, default=0.0)
        plain: int = 0
        inner: Inner = field(default_factory=Inner)

    assert parts(Outer) == {"x": Provenance.MODELED}
    assert parts(Outer()) == {"x": "modeled", "inner": {"a": "measured"}}
    assert Footprint().to_dict()["kind"] == {"predicted": "modeled", "measured": "measured"}


def test_run_result_and_projection_label_each_part():
    from gnnrec_lab.memory.tiermodel import RunProjection
    from gnnrec_lab.training.loop import RunResult
    kind = RunResult(RunConfig()).to_dict()["kind"]
    assert kind == {"train_seconds": "measured", "epoch_seconds": "measured", "jit_seconds": "measured",
                    "kernels": "measured", "phases": "measured", "best_valid": "measured", "test": "measured",
                    "history": "measured", "footprint": {"predicted": "modeled", "measured": "measured"},
                    "modeled": "modeled"}
    d = RunProjection("cxl", "cxl", 1.0, 2.0).to_dict()
    assert d["kind"] == "modeled" and d["kinds"] == {"measured_s_per_step": "measured",
                                                     "modeled_s_per_step": "modeled", "kernels": "modeled",
                                                     "regimes": "modeled", "band": "modeled",
                                                     "base": "measured"}     # the median step it starts from
    assert json.loads(json.dumps(d))["kinds"] == d["kinds"]


def test_kernel_records_carry_their_provenance():
    r = Recorder()
    r.record("spmm", 100)
    assert r.records[0].provenance is Provenance.MEASURED and "provenance" in RECORD_FIELDS
    assert list(r.frame().provenance) == ["measured"]


def test_advise_records_are_modeled_and_stored_ones_measured(tmp_path):
    from gnnrec_lab.memory.advise import step_records
    from gnnrec_lab.runs.store import Store
    from gnnrec_lab.services.projection import reference_records
    host = dict(copy_GBps=9.0, triad_GBps=8.0, gather64_GBps=3.0, gather256_GBps=6.0, latency_ns=90.0,
                gemm_GFLOPs=50.0, threads=2, kind="host", measured=True)
    counts = dict(n_users=50, n_items=40, n_train=300)
    recs = step_records(RunConfig(layers=1, dim=8, batch_size=64), counts, host)
    assert recs and all(r.provenance is Provenance.MODELED and r.backend == "" for r in recs)
    s = Store(tmp_path)
    rid = s.add_run(RunConfig(backend="native"))
    s.add_step(rid, 0, 0, 0.5, 0.1, [rec("spmm", 100), rec("spmm", 50)])
    ref = reference_records(s, rid)
    assert [(r.name, r.ns, r.provenance, r.backend) for r in ref] == [("spmm", 150, Provenance.MEASURED, "native")]
    s.close()


def test_kernel_totals_name_their_slots():
    records = [rec("spmm", 100, row_bytes=64), rec("spmm", 50, row_bytes=128), rec("gemm", 7, layer=1)]
    agg = sum_records(records, store_key)
    t = agg[("spmm", "forward", 0, "gather")]
    assert isinstance(t, KernelTotals)
    assert (t.calls, t.ns, t.bytes_read, t.bytes_written, t.flops, t.random_bytes, t.row_bytes) == \
        (2, 150, 20, 40, 60, 10, 128)
    assert t.values() == tuple(t.as_dict().values()) and tuple(t.as_dict()) == TOTAL_FIELDS
    assert TOTAL_FIELDS == SUMMED_FIELDS + ("row_bytes",)
    sum_records([rec("spmm", 1, row_bytes=8)], store_key, into=agg)     # running totals keep the widest row
    assert (t.calls, t.ns, t.row_bytes) == (3, 151, 128)
    rows = totals_rows(agg, STORE_KEY)
    assert rows[0] == dict(name="spmm", phase="forward", layer=0, pattern="gather", calls=3, ns=151, bytes_read=30,
                           bytes_written=60, flops=90, random_bytes=15, row_bytes=128)
    assert list(rows[1])[:4] == list(STORE_KEY)


def test_one_converter_turns_records_into_a_frame():
    Row = namedtuple("Row", "name phase ns bytes_read bytes_written pattern calls")
    r = rec("spmm", 100)
    as_tuple = tuple(getattr(r, f) for f in RECORD_FIELDS)
    for given in ([r], [as_tuple], [dict(zip(RECORD_FIELDS, as_tuple))]):
        df = records_frame(given)
        assert list(df.columns) == list(RECORD_FIELDS) and df.iloc[0]["ns"] == 100
    free = records_frame([Row("spmm", "forward", 5, 1, 2, "stream", 3)], columns=None)
    assert list(free.columns) == list(Row._fields)     # a pre-aggregated row keeps its calls
    df = pd.DataFrame({"name": ["a"]})
    assert records_frame(df) is df and records_frame([]).empty
    with pytest.raises(UserError, match="missing field 'ns'"):
        records_frame(df, require=("name", "ns"))
