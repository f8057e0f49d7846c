"""YAML run files: `run --config`, `sweep --config`, `run --save-config`.

The file holds RunConfig's fields and is validated by RunConfig itself; flags override it;
an invalid field names the file and its line.
"""
from __future__ import annotations

import pytest
from _cli import run_cli as _cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gnnrec_lab.commands import cli
from gnnrec_lab.commands.common import config_from_args
from gnnrec_lab.config.run import RunConfig, read_config_file, save_config_file
from gnnrec_lab.util.errors import ConfigError

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _args(argv):
    return cli.build_parser().parse_args(["run"] + [str(a) for a in argv])




@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNREC_LAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


configs = st.builds(
    RunConfig, dataset=st.sampled_from(["ml-100k", "synth-tiny", "synth:users=10,items=10,interactions=50"]),
    layers=st.integers(1, 4), dim=st.integers(1, 512), lr=st.floats(1e-6, 1.0), l2=st.sampled_from([0.0, 1e-4, 0.5]),
    optimizer=st.sampled_from(["adam", "sgd", "lamb"]),
    topk=st.lists(st.integers(1, 100), min_size=1, max_size=3).map(tuple),
    target_recall=st.none() | st.floats(0.01, 1.0), placement=st.sampled_from([{}, {"embeddings": "dram"}]),
    # any name RunConfig takes (check_run_name): no control characters, not blank
    name=st.none() | st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp", "Cs")), max_size=20).filter(
        lambda s: s == "" or s.strip()))


@SETTINGS
@given(config=configs)
def test_saved_file_reads_back_as_the_same_config(tmp_path, config):
    path = tmp_path / "run.yaml"
    save_config_file(config, path)
    assert config_from_args(_args(["--config", path])) == config


def test_flags_override_the_file_and_the_file_overrides_defaults(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("dataset: synth-tiny\nlayers: 2\ndim: 16\nlr: 1e-2\nfanouts: [5, 5]\n"
                    "placement: {embeddings: dram}\n")
    c = config_from_args(_args(["--config", path, "--dim", "32"]))
    assert (c.dataset, c.layers, c.dim, c.lr, c.fanouts, c.placement) == \
        ("synth-tiny", 2, 32, 0.01, (5, 5), {"embeddings": "dram"})
    assert c.batch_size == RunConfig().batch_size
    # model mf drops RunConfig's default layers, not layers the file asks for
    with pytest.raises(ConfigError, match=r"run\.yaml:2: layers: model 'mf' has no propagation layers"):
        config_from_args(_args(["--config", path, "--model", "mf"]))
    assert config_from_args(_args(["--config", path, "--model", "mf", "--layers", "0"])).layers == 0
    path.write_text("model: mf\n")
    assert config_from_args(_args(["--config", path])).layers == 0


@pytest.mark.parametrize("text, line, words", [
    ("dataset: synth-tiny\ndim: 0\n", 2, "dim: must be an integer from 1 to"),
    ("layers: 2\nbatchsize: 10\n", 2, "batchsize: unknown field; allowed:"),
    ("layers: 2\n\nlayers: 3\n", 3, "layers: given twice (first on line 1)"),
    ("dim: 8\nlr: fast\n", 2, "lr: must be a finite number > 0"),
    ("dim: 8\ntopk: [10, -1]\n", 2, "topk: must be 1 to 64 comma-separated integers"),
    ("dim: 8\nmodel: gcn\n", 2, "model: got 'gcn', allowed:"),
    ("dim: 8\nplacement: {embeddings: tape}\n", 2, "placement"),
    ("dim: [8\nlayers: 2\n", 2, "not valid YAML"),
    ("- dim: 8\n", 1, "expected a mapping of RunConfig fields"),
])
def test_bad_file_names_the_file_the_line_and_the_field(tmp_path, capsys, home, text, line, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc, out, err = _cli(["run", "--config", path], capsys)
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"{path}:{line}: " in err and words in err, err
    assert not (home / "lab.sqlite").exists() or "run" not in out


def test_a_flag_that_fixes_a_bad_file_field_wins_and_bad_flag_is_not_blamed_on_the_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("dim: 0\n")
    assert config_from_args(_args(["--config", path, "--dim", "8"])).dim == 8
    path.write_text("dim: 8\n")
    with pytest.raises(ConfigError) as e:
        config_from_args(_args(["--config", path, "--layers", "0"]))
    assert e.value.param == "layers" and str(path) not in str(e.value)


@pytest.mark.parametrize("make, words", [
    (lambda d: d / "missing.yaml", "no such file"),
    (lambda d: d, "is a directory"),
])
def test_missing_config_file(tmp_path, capsys, home, make, words):
    rc, out, err = _cli(["run", "--config", make(tmp_path)], capsys)
    assert rc == 2 and "--config" in err and words in err, err


def test_save_config_writes_and_does_not_train(tmp_path, capsys, home):
    path = tmp_path / "saved.yaml"
    rc, out, err = _cli(["run", "--dataset", "synth-tiny", "--layers", "1", "--dim", "8", "--save-config", path],
                        capsys)
    assert rc == 0, err
    assert "wrote" in out and not (home / "lab.sqlite").exists()
    fields, lines = read_config_file(path)
    assert fields["dim"] == 8 and fields["layers"] == 1 and set(fields) == set(RunConfig().to_dict())
    rc, out, err = _cli(["run", "--dim", "0", "--save-config", path], capsys)
    assert rc == 2 and "dim" in err                                    # validated before writing
    assert read_config_file(path)[0]["dim"] == 8
    rc, out, err = _cli(["run", "--save-config", tmp_path / "no" / "x.yaml"], capsys)
    assert rc == 2 and "--save-config" in err


def test_sweep_config_lists_are_axes_and_flags_replace_them(tmp_path, capsys, home):
    path = tmp_path / "sweep.yaml"
    path.write_text("dataset: synth-tiny\nepochs: 1\nlayers: [1, 2]\ndim: [8, 16]\ntopk: [5, 10]\n")
    rc, out, err = _cli(["sweep", "--config", path, "--dry-run"], capsys)
    assert rc == 0, err
    assert "4 point(s), varying layers, dim" in out
    rc, out, err = _cli(["sweep", "--config", path, "--dim", "32", "--dry-run"], capsys)
    assert "2 point(s), varying layers" in out and "dim=" not in out
    path.write_text("dataset: synth-tiny\nmode: sampled\nlayers: 2\nfanouts: [[5, 5], [10, 10]]\n")
    rc, out, err = _cli(["sweep", "--config", path, "--dry-run"], capsys)
    assert "2 point(s), varying fanouts" in out, err
    path.write_text("dataset: synth-tiny\nlayers: [1, 0]\n")
    rc, out, err = _cli(["sweep", "--config", path, "--dry-run"], capsys)
    assert rc == 2 and f"{path}:2: layers:" in err, err
