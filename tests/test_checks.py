"""Checks declared as data: every constraint of every table (gnnrec_lab.config.checks) broken once, each
refusal a ConfigError naming the field."""
import argparse
import dataclasses

import pytest

from gnnrec_lab.cache.request import SIM_CONSTRAINTS, SimRequest, form_name
from gnnrec_lab.config.checks import Interval, Rule, alternatives, broken_values, rules
from gnnrec_lab.config.run import MODEL_OPTIONS, NUMERIC_FIELDS, RUN_CONSTRAINTS, RunConfig
from gnnrec_lab.distributed.spec import DIST_CONSTRAINTS, DistSpec
from gnnrec_lab.memory.footprint import COUNT_CONSTRAINTS, check_counts
from gnnrec_lab.runs.runner import RUNNER_CONSTRAINTS, Runner
from gnnrec_lab.util.errors import ConfigError

_DIST_BASE = dict(workdir="/tmp/w", graph_name="g", partitions=2, dataset="synth-tiny")
_COUNTS = dict(n_users=10, n_items=20, n_train=30)

# table -> how one object is built from field overrides, the label a field is named by, and
# whether values may be text
TABLES = {
    "RunConfig": (RUN_CONSTRAINTS, lambda kw: RunConfig(**kw), str, False),
    "SimRequest": (SIM_CONSTRAINTS, lambda kw: SimRequest(**kw).checked(), form_name, False),
    "Runner": (RUNNER_CONSTRAINTS, lambda kw: Runner(**kw), str, False),
    "DistSpec": (DIST_CONSTRAINTS, lambda kw: DistSpec(**{**_DIST_BASE, **kw}), str, False),
    "counts": (COUNT_CONSTRAINTS, lambda kw: check_counts({**_COUNTS, **kw}), lambda k: f"counts: {k}", True),
}


def _cases():
    for table_name, (table, _, _, text) in TABLES.items():
        for field, constraints in table.items():
            for i, (c, value) in enumerate(broken_values(constraints, text)):
                yield pytest.param(table_name, field, value, id=f"{table_name}.{field}-{type(c).__name__}-{i}")
            for rule in rules(constraints):
                yield pytest.param(table_name, field, rule, id=f"{table_name}.{field}-{rule.name}")


@pytest.mark.parametrize("table_name, field, broken", list(_cases()))
def test_every_constraint_broken_once_names_the_field(table_name, field, broken):
    _, build, label, _ = TABLES[table_name]
    kw = broken.breaks if isinstance(broken, Rule) else {field: broken}
    with pytest.raises(ConfigError) as e:
        build(kw)
    assert e.value.param == label(field), (e.value.param, str(e.value))
    assert str(e.value).startswith(f"{label(field)}: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("table_name", list(TABLES))
def test_every_value_constraint_has_a_value_that_breaks_it(table_name):
    table, build, _, text = TABLES[table_name]
    for field, constraints in table.items():
        broken = {id(c) for c, _ in broken_values(constraints, text)}
        missing = [c for c in alternatives(constraints) if c is not None and id(c) not in broken]
        assert not missing, (field, missing)
    build({})   # the defaults pass every constraint


def test_run_constraints_cover_every_field_in_order():
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name != "model_options"]
    at = fields.index("model") + 1   # the models' own options follow the model
    assert list(RUN_CONSTRAINTS) == [*fields[:at], *MODEL_OPTIONS, *fields[at:]]
    assert list(DIST_CONSTRAINTS) == [f.name for f in dataclasses.fields(DistSpec)]
    assert list(SIM_CONSTRAINTS) == [f.name for f in dataclasses.fields(SimRequest)]
    assert RunConfig._parameter_constraints is RUN_CONSTRAINTS


@pytest.mark.parametrize("name", sorted(NUMERIC_FIELDS))
def test_cli_flags_are_generated_from_the_table(name):
    """A numeric field's flag refuses, as text, every number its constraints refuse."""
    from gnnrec_lab.commands.common import field_type
    parse = field_type(name)
    tried = 0
    for c, value in broken_values(RUN_CONSTRAINTS[name]):
        if isinstance(c, Interval) and c.check.__name__ == "integer" and type(value) is int:
            with pytest.raises(argparse.ArgumentTypeError):
                parse(str(value))
            tried += 1
    if any(isinstance(c, Interval) and c.check.__name__ == "integer" for c in RUN_CONSTRAINTS[name]):
        assert tried
    assert parse.bounded


def test_a_built_config_is_frozen_and_leaves_what_was_passed_alone():
    fanouts, topk, placement = [5, 5], [20, 10, 10], {"embeddings": "dram"}
    c = RunConfig(mode="sampled", layers=2, fanouts=fanouts, topk=topk, cache_size=" 5% ", placement=placement)
    assert (c.fanouts, c.topk, c.cache_size) == ((5, 5), (10, 20), "5%")
    assert fanouts == [5, 5] and topk == [20, 10, 10]
    placement["graph"] = "dram"                      # the caller's dict is not the config's
    assert c.placement == {"embeddings": "dram"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.dim = 8
    assert c.replace(dim=8).dim == 8 and c.dim == 64
    with pytest.raises(ConfigError, match="dim"):
        c.replace(dim=0)
    assert c.validate() is c


def test_mf_layers_is_the_one_rule():
    from gnnrec_lab.config.run import MF_LAYERS, mf_layers
    assert mf_layers("mf", 3) == MF_LAYERS == 0 and mf_layers("lightgcn", 3) == 3
    assert mf_layers("mf", 2, given=True) == 2          # then the table's rule refuses it
    with pytest.raises(ConfigError, match="model 'mf' has no propagation layers"):
        RunConfig(model="mf", layers=mf_layers("mf", 2, given=True))
    with pytest.raises(ConfigError, match="from 1 to 64"):
        RunConfig(layers=0)


def test_distributed_flags_are_checked_with_the_spec_table():
    from gnnrec_lab.commands import cli
    from gnnrec_lab.commands.distributed import _check
    parser = cli.build_parser()
    for argv, flag in [(["--layers", "0"], "--layers"), (["--model", "mf"], "--model"),
                       (["--fanouts", "5,5,5"], "--fanouts"), (["--partitions", "4", "--batch-size", "2"],
                                                               "--batch-size")]:
        with pytest.raises(ConfigError) as e:
            _check(parser.parse_args(["distributed", *argv]))
        assert e.value.param == flag
