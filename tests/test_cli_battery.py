"""The bad-input battery: every user mistake ends in ONE line that names the parameter
(or the file and line) and exit status 2; nothing is queued, lost or recreated.

The CLI runs in-process through ``gnnrec_lab.commands.cli.main`` (no interpreter start per case);
every case is refused before any training or allocation, so the battery is quick.
"""
from __future__ import annotations

import os
import sqlite3

import pytest

from gnnrec_lab.commands import cli
from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.util.errors import ConfigError, UserError


def run_cli(argv, capsys) -> tuple[int, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's own refusals exit from inside parse_args
        rc = e.code
    return rc, capsys.readouterr().err.strip()


def assert_one_line(rc, err, needle):
    assert rc == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("gnnrec-lab: error:"), err
    assert needle in err, err


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("GNNREC_LAB_HOME", str(h))
    return h


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-inputs")
    (d / "bigid.csv").write_text("1," + "9" * 5_000_000 + ",5\n")
    (d / "nan.csv").write_text("user,item,rating\n1,2,4\n3,4,nan\n")
    (d / "inf.csv").write_text("user,item,rating\n1,2,4\n3,4,inf\n")
    (d / "latin1.csv").write_bytes("user,item\nJos\xe9,a\nJos\xe8,a\n".encode("latin-1"))
    os.mkfifo(d / "pipe.csv")
    return d


# (argv, text the one line must contain); {files} is the directory of the files above
BATTERY = [
    ("run --warmup-epochs inf", "--warmup-epochs"),
    ("run --seed 18446744073709551616", "seed"),
    ("run --dim 1000000000000", "dim"),
    ("run --mode sampled --fanouts 1000000000000,10,10", "fanouts"),
    ("run --dataset synth:users=1000000000000,items=10,interactions=100", "dataset"),
    ("run --dataset synth:users=1m,items=1m,interactions=1000000000000", "dataset"),
    ("run --mode sampled --cache-policy lru --cache-size 99999999999", "cache_size"),
    ("run --data-dir /proc", "data_dir"),
    ("run --trace /nonexistent/dir/t.json", "--trace"),
    ("run --detach --memory-limit infG", "--memory-limit"),
    ("run --detach --memory-limit 1e400", "--memory-limit"),
    ("data prepare {files}/bigid.csv --name bigid --data-dir {files}/dd", "bigid"),
    ("data list --data-dir /etc/passwd", "data_dir"),
    ("whatif abc --device cxl", "run_id"),
    ("whatif 1 --device cxl --dram-gb nan", "--dram-gb"),
    ("whatif 1 --device cxl --dram-gb -1", "--dram-gb"),
    ("runs show 1000000000000000000000000000000", "id"),
    ("advise --dataset ml-100k --dram-gb nan", "--dram-gb"),
    ("advise --dataset ml-100k --dram-gb inf", "--dram-gb"),
    ("dashboard --address bogus.invalid", "--address"),
    ("dashboard --address 0.0.0.0", "--allow-remote"),
    # issue 12 item 3: non-finite values refused at the door
    ("run --lr inf", "--lr"), ("run --lr nan", "--lr"), ("run --l2 inf", "--l2"),
    ("run --weight-decay inf", "--weight-decay"), ("run --momentum nan", "--momentum"),
    # the poor cases
    ("run --placement embeddings=numa:membind:5", "placement"),
    ("run --placement embeddings=numa:bind:x", "placement"),
    ("run --placement embeddings=file:/nonexistent/pmem", "placement"),
    ("run --data-dir ''", "data_dir"),
    ("run --device-profile bogus", "device_profile"),
    ("run --threads 100000", "threads"),
    ("data prepare {files}/nan.csv --name nanr --data-dir {files}/dd", "nan.csv:3"),
    ("data prepare {files}/inf.csv --name infr --data-dir {files}/dd", "inf.csv:3"),
    ("data prepare {files}/latin1.csv --name lat --data-dir {files}/dd", "latin1.csv:2: not UTF-8"),
    ("data prepare {files}/pipe.csv --name pipe --data-dir {files}/dd", "not a regular file"),
]


@pytest.mark.parametrize("argv, needle", BATTERY, ids=[b[0][:60] for b in BATTERY])
def test_bad_input_is_one_line_naming_the_parameter(argv, needle, files, home, capsys):
    import shlex
    rc, err = run_cli(shlex.split(argv.format(files=files)), capsys)
    assert_one_line(rc, err, needle)


def test_detach_validates_before_queuing(home, capsys):
    from gnnrec_lab.runs.store import Store
    rc, err = run_cli(["run", "--detach", "--dataset", "nosuch"], capsys)
    assert_one_line(rc, err, "dataset")
    rc, err = run_cli(["run", "--detach", "--placement", "embeddings=numa:membind:5"], capsys)
    assert_one_line(rc, err, "placement")
    assert Store(home).run_ids() == []       # nothing was queued


def test_parquet_nested_columns_are_refused(tmp_path, capsys, home):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    t = pa.table({"user": [[1, 2], [3]], "item": [1, 2]})
    pq.write_table(t, tmp_path / "nested.parquet")
    rc, err = run_cli(["data", "prepare", str(tmp_path / "nested.parquet"), "--data-dir", str(tmp_path / "dd")],
                      capsys)
    assert_one_line(rc, err, "'user'")


@pytest.mark.parametrize("field, value", [
    ("lr", float("inf")), ("lr", float("nan")), ("l2", float("inf")), ("weight_decay", float("inf")),
    ("warmup_epochs", float("inf")), ("momentum", float("nan")), ("target_recall", float("nan")),
    ("seed", 2**64), ("dim", 10**12), ("threads", 10**5), ("fanouts", (10**12,)), ("cache_size", "nan%"),
    ("data_dir", ""), ("placement", {"embeddings": "numa:membind:"}), ("placement", {"embeddings": "file:"}),
])
def test_run_config_refuses_non_finite_and_out_of_range(field, value):
    """The same refusals for every path (CLI, dashboard, notebooks, the runner): RunConfig names the field."""
    with pytest.raises(ConfigError) as e:
        RunConfig(**{field: value})
    assert e.value.param == field and "\n" not in str(e.value)


def test_os_and_memory_errors_are_one_line(monkeypatch, capsys, home):
    """The top-level handler: an OSError or MemoryError from anywhere names its cause, exit 2."""
    from gnnrec_lab.commands import run as run_cmd

    def boom(exc):
        def f(args):
            raise exc
        return f

    for exc, needle in ((PermissionError(13, "Permission denied", "/data/x.npy"), "/data/x.npy: Permission denied"),
                        (MemoryError("Unable to allocate 69.8 TiB"), "out of memory (Unable to allocate 69.8 TiB)"),
                        (sqlite3.DatabaseError("database disk image is malformed"), "run store")):
        monkeypatch.setattr(run_cmd, "main", boom(exc))
        rc, err = run_cli(["run"], capsys)
        assert_one_line(rc, err, needle)


# ---------------------------------------------------------------------------
# pre-flight: the predicted footprint against the memory available (issue 12 item 10)
# ---------------------------------------------------------------------------
def test_preflight_refuses_a_config_that_does_not_fit(monkeypatch, capsys, home):
    from gnnrec_lab.memory import preflight
    monkeypatch.setattr(preflight, "available_bytes", lambda: 1 << 20)   # a 1 MiB machine
    rc, err = run_cli(["run", "--dataset", "synth-tiny", "--epochs", "1"], capsys)
    assert_one_line(rc, err, "footprint: predicted")
    assert "--force" in err and "1.0 MiB" in err
    cfg = RunConfig(dataset="synth-tiny")
    assert preflight.check_launch(cfg, force=True) > 1 << 20                   # --force skips it
    with pytest.raises(UserError, match="memory limit"):
        preflight.check_launch(cfg, memory_limit_bytes=1 << 20, available=1 << 40)


def test_preflight_does_not_count_classes_placed_off_dram(tmp_path):
    from gnnrec_lab.memory import preflight
    cfg = RunConfig(dataset="synth-tiny", dim=256)
    dram = preflight.check_launch(cfg, available=1 << 40)
    off = RunConfig(dataset="synth-tiny", dim=256,
                    placement={c: f"file:{tmp_path}" for c in ("embeddings", "optimizer", "gradients")})
    off_dram = preflight.check_launch(off, available=dram - 1)            # fits once those are off DRAM
    assert off_dram < dram
    with pytest.raises(UserError, match="footprint"):
        preflight.check_launch(cfg, available=dram - 1)


def test_cache_larger_than_the_table_is_refused_before_allocating():
    """Every path (a notebook calling train directly too): the cache buffer is not allocated."""
    import types

    import torch

    from gnnrec_lab.cache.cached_rows import make_cached_rows
    model = types.SimpleNamespace(embedding=torch.nn.Parameter(torch.zeros(10, 4)))
    cfg = RunConfig(dataset="synth-tiny", mode="sampled", cache_policy="lru", cache_size="99999999999")
    with pytest.raises(ConfigError, match="more than the embedding table's 10 rows"):
        make_cached_rows(cfg, model, None)


# -- --help: every option says in words what it does and what happens when it is not given ------
import argparse  # noqa: E402
import re  # noqa: E402

from gnnrec_lab.config.run import field_help  # noqa: E402

_FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction,
          argparse._AppendConstAction, argparse._CountAction, argparse._HelpAction, argparse._VersionAction,
          argparse.BooleanOptionalAction)


def _parsers(parser, path=("gnnrec-lab",)):
    yield " ".join(path), parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _parsers(sub, path + (name,))


def _words(text) -> set:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_every_option_has_help_in_words_with_its_default():
    bad = []
    for prog, parser in _parsers(cli.build_parser()):
        parser.format_help()                      # every help string formats (a bare % would raise here)
        for a in parser._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            flag = a.option_strings[-1] if a.option_strings else a.dest
            text = (a.help or "") % {"default": a.default, "prog": prog}
            if len(_words(text) - _words(flag) - {"the", "a", "of", "default", "none"}) < 3:
                bad.append(f"{prog} {flag}: help {a.help!r} says no more than the flag")
            elif a.option_strings and not a.required and not isinstance(a, _FLAGS) and "default" not in text:
                bad.append(f"{prog} {flag}: help {a.help!r} does not say its default")
    assert not bad, "\n".join(bad)


def test_run_and_sweep_help_is_the_field_help():
    """The words come from config.FIELD_DOCS, the source the dashboard's labels and tooltips use."""
    for command in ("run", "sweep"):
        parser = dict(_parsers(cli.build_parser()))[f"gnnrec-lab {command}"]
        group = next(g for g in parser._action_groups if g.title == "run configuration")
        helps = {a.dest: a.help % {} for a in group._group_actions}
        assert set(helps) == (set(OPTIONS) - ({"name"} if command == "sweep" else set()))
        for name, text in helps.items():
            assert text == field_help(name), name


# ---------------------------------------------------------------------------
# numbers at the door (issue 23 class 5): every numeric option of every command goes through the
# shared bounded parsers (gnnrec_lab.config.bounds), the same ones RunConfig validates with
# ---------------------------------------------------------------------------
import math  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gnnrec_lab.commands.common import field_type  # noqa: E402
from gnnrec_lab.config.bounds import integer, integers, number  # noqa: E402
from gnnrec_lab.config.run import NUMERIC_FIELDS, OPTIONAL_FIELDS, OPTIONS, check_field  # noqa: E402

_PARSER = cli.build_parser()
# text no numeric option accepts: not finite, not a number, an empty list item, an empty value
NEVER_A_NUMBER = ("nan", "inf", "-inf", "1e400", "abc", "", "10,,10", "0x10", "1_0_", "5;")
# argparse types that take words, not numbers
_WORD_TYPES = (str,)


def _numeric_options():
    """(argv prefix, flag or None for a positional, action) for every option whose value is a number."""
    out = []
    for prog, parser in _parsers(_PARSER):
        path = prog.split()[1:]
        for a in parser._actions:
            if getattr(a.type, "bounded", False):
                out.append((path, a.option_strings[-1] if a.option_strings else None, a))
    return out


NUMERIC_OPTIONS = _numeric_options()


def test_every_numeric_option_is_bounded():
    """No option parses with bare int/float (unbounded, 'invalid int value'), and every option that sets
    a numeric RunConfig field, or that a command reads as a number, uses the bounded parsers."""
    bad = []
    for prog, parser in _parsers(_PARSER):
        for a in parser._actions:
            flag = a.option_strings[-1] if a.option_strings else a.dest
            if a.type in (int, float):
                bad.append(f"{prog} {flag}: type {a.type.__name__} is not bounded")
            elif a.dest in NUMERIC_FIELDS and not getattr(a.type, "bounded", False):
                bad.append(f"{prog} {flag}: RunConfig field {a.dest} parsed without its bounds")
            elif (a.type not in (None,) + _WORD_TYPES and not getattr(a.type, "bounded", False)
                  and not getattr(a.type, "words", False)
                  and a.dest not in ("placement", "sizes", "backends", "kernels")):
                bad.append(f"{prog} {flag}: type {a.type!r} is not one of the bounded parsers")
    assert not bad, "\n".join(bad)
    commands = {tuple(p[:1]) for p, _, _ in NUMERIC_OPTIONS}
    assert len(NUMERIC_OPTIONS) > 60 and len(commands) >= 10, (len(NUMERIC_OPTIONS), commands)


def _parse(argv, capsys) -> tuple:
    try:
        _PARSER.parse_args(argv)
        rc = 0
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("path, flag, action", NUMERIC_OPTIONS,
                         ids=[" ".join(p) + " " + (f or a.dest) for p, f, a in NUMERIC_OPTIONS])
def test_numeric_option_refuses_what_is_not_a_number(path, flag, action, capsys):
    """Generated over every numeric option: each value that is no number is one line naming the
    option, exit 2, in words (never the name of a function: 'invalid _ints value')."""
    for value in NEVER_A_NUMBER:
        argv = path + ([f"{flag}={value}"] if flag else ["--", value])
        rc, err = _parse(argv, capsys)
        assert rc == 2, (argv, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err)
        assert err.startswith(f"gnnrec-lab: error: argument {flag or action.dest}"), (argv, err)
        assert "invalid " not in err and "<lambda>" not in err and "parse" not in err.split(":")[3], (argv, err)


_ANY_TEXT = st.one_of(
    st.integers(min_value=-10**30, max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.lists(st.integers(min_value=-3, max_value=2**40),
             min_size=0, max_size=70).map(lambda xs: ",".join(map(str, xs))),
    st.text(alphabet="0123456789-+.,e _x", max_size=12))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(NUMERIC_OPTIONS), _ANY_TEXT)
def test_numeric_option_accepts_only_finite_bounded_values(option, text):
    """Whatever text arrives, a numeric option's parser returns a finite number (or a tuple of
    integers) or refuses in words; it never raises anything else."""
    import argparse as ap
    _, _, action = option
    try:
        v = action.type(text)
    except ap.ArgumentTypeError as e:
        assert "\n" not in str(e) and str(e)
        return
    for x in (v if isinstance(v, (list, tuple)) else [v]):
        assert isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x), (text, v)


_FIELD_VALUES = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.none(), st.booleans(), st.text(max_size=5),
    st.lists(st.integers(min_value=-5, max_value=2**30), max_size=70),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(NUMERIC_FIELDS)), _FIELD_VALUES)
def test_run_config_numeric_fields_refuse_by_name_or_hold_in_bounds(name, value):
    """Generated over RunConfig's numeric fields (the Python API): a value is kept in bounds or
    refused by a ConfigError naming the field, never TypeError/OverflowError."""
    kw = {name: value}
    if name == "layers" and value == 0:
        kw["model"] = "mf"
    try:
        cfg = RunConfig(**kw)
    except ConfigError as e:
        assert e.param in (name, "fanouts") and "\n" not in str(e), (name, value, e)   # layers -> fan-out count
        return
    kept = getattr(cfg, name)
    if kept is None:
        assert name in OPTIONAL_FIELDS
        return
    assert check_field(name, kept, text=False) == kept


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(NUMERIC_FIELDS)), st.one_of(st.integers(min_value=-2**40, max_value=2**40),
                                                          st.floats(allow_nan=False, allow_infinity=False)))
def test_cli_flag_and_run_config_agree(name, value):
    """The flag and the field refuse the same numbers: one set of bounds."""
    import argparse as ap
    text = repr(value) if isinstance(value, float) else str(value)
    try:
        field_type(name)(text)
        cli_ok = True
    except ap.ArgumentTypeError:
        cli_ok = False
    try:
        check_field(name, (value,) if name in ("fanouts", "topk") else value, text=False)
        api_ok = True
    except ConfigError:
        api_ok = False
    # an integer field given a float is refused by both; text of an int is what the CLI gets
    assert cli_ok == api_ok or (isinstance(value, float) and not cli_ok), (name, value, cli_ok, api_ok)


@pytest.mark.parametrize("check, args, value, needle", [
    (integer, ("n", "12", 1, 10), None, "from 1 to 10"), (integer, ("n", "1e3"), None, "integer"),
    (integer, ("n", True), None, "integer"), (number, ("x", "nan"), None, "finite"),
    (number, ("x", 10**400), None, "finite"), (integers, ("f", "10,,10"), None, "item 2"),
    (integers, ("f", None), None, "comma-separated"), (integers, ("f", "1," * 70), None, "1 to 64"),
])
def test_bounded_checkers_say_what_is_allowed(check, args, value, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)) as e:
        check(*args)
    assert e.value.param == args[0]


# the examples the issue found, now refused at the door (each one of its class above)
NUMBERS_AT_THE_DOOR = [
    ("advise --dataset ml-100k --dram-gb 1e308", "--dram-gb"),
    ("whatif 1 --device cxl --dram-gb 1e308", "--dram-gb"),
    ("advise --dataset ml-100k --dram-gb 4 --counts n_users=1e21,n_items=10,n_train=10", "n_users"),
    ("advise --dataset ml-100k --dram-gb 4 --counts n_users=10,n_items=10,n_train=1000", "n_users x n_items"),
    ("advise --dataset ml-100k --dram-gb 4 --counts n_users=10,n_items=10", "n_train is missing"),
    ("bench kernels --dims 100000000", "--dims"), ("bench recording --dims 0", "--dims"),
    ("bench kernels --dims=-5", "--dims"), ("bench kernels --repeats 0", "--repeats"),
    ("bench recording --repeats 2", "--repeats"), ("bench kernels --sizes large --dims 65536", "available"),
    ("sweep --timeout=-5", "--timeout"), ("sweep --timeout nan", "--timeout"),
    ("sweep --max-concurrent 0", "--max-concurrent"),
    ("runs cancel 1 --grace=-1", "--grace"), ("runs wait 1 --timeout 0", "--timeout"),
    ("dashboard --port 70000", "--port"), ("dashboard --max-runs 0", "--max-runs"),
    ("run --mode sampled --fanouts 10,,10", "--fanouts"), ("distributed --fanouts 10,,10", "--fanouts"),
    ("cache sim --dataset ml-100k --model lightgcn --fanouts 10,,10", "--fanouts"),
    ("cache sim --dataset ml-100k --cache-size 99999999999", "more than the embedding table"),
    ("run --placement embeddings=dram,embeddings=file:/tmp", "two placements"),
    ("run --no-store --detach", "--no-store"), ("run --trace ''", "--trace: empty path"),
    ("data prepare x --seed=-3", "--seed"), ("data prepare x --min-rating nan", "--min-rating"),
    ("bench kernels --sizes ,", "--sizes"),
]


@pytest.mark.parametrize("argv, needle", NUMBERS_AT_THE_DOOR, ids=[b[0][:60] for b in NUMBERS_AT_THE_DOOR])
def test_numbers_at_the_door(argv, needle, home, capsys):
    import shlex
    rc, err = run_cli(shlex.split(argv), capsys)
    assert_one_line(rc, err, needle)
    assert "invalid " not in err, err


def test_python_api_names_what_it_expects(home):
    import gnnrec_lab
    with pytest.raises(UserError, match="expected a gnnrec_lab.RunConfig, got dict.*from_dict"):
        gnnrec_lab.run({"dim": 3})
    with pytest.raises(ConfigError, match="fanouts"):
        RunConfig(fanouts=None)
    with pytest.raises(ConfigError, match="topk"):
        RunConfig(topk=None)
    with pytest.raises(ConfigError, match="expected a dict"):
        RunConfig.from_dict([("dim", 3)])
    from gnnrec_lab.runs.runner import Runner
    from gnnrec_lab.runs.store import Store
    with pytest.raises(UserError, match="Runner.launch: config: expected a gnnrec_lab.RunConfig, got str"):
        Runner(Store(os.environ["GNNREC_LAB_HOME"]), pick_up=False).launch("ml-100k")
    with pytest.raises(UserError, match="Store.add_run: config: expected a gnnrec_lab.RunConfig, got dict"):
        Store(os.environ["GNNREC_LAB_HOME"]).add_run({"dataset": "ml-100k"})


@pytest.mark.parametrize("cls", ["graph", "embeddings", "optimizer", "gradients", "activations",
                                 "edge_intermediates", "buffers"])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_tensor_class_given_two_placements_is_refused(cls, command, tmp_path, capsys, home):
    """Generated over every tensor class and both commands that take --placement: the last of two
    placements does not silently win."""
    rc, err = run_cli([command, "--placement", f"{cls}=dram,{cls}=file:{tmp_path}"], capsys)
    assert_one_line(rc, err, "two placements")
    assert cls in err
