"""Models and memory modes declare themselves once: every model's builder and cost hooks sit in
gnnrec_lab.models.registry (footprint and advise read the hooks, no model names), every memory mode
with its device in gnnrec_lab.config.memory_modes; a missing part fails here. A toy model that a
test registers trains, and footprint and advise accept it: this file is all it needs."""
from __future__ import annotations

import abc
import json

import numpy as np
import pytest

from gnnrec_lab import RunConfig, run
from gnnrec_lab.config import run as config_run
from gnnrec_lab.config.bounds import integer
from gnnrec_lab.config.checks import Interval
from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE, PLACEMENTS
from gnnrec_lab.memory.advise import ADVISED_MODE_DEVICES, advise, step_kernels
from gnnrec_lab.memory.footprint import footprint, footprint_phases
from gnnrec_lab.memory.tiermodel import MODE_DEVICES, mode_device
from gnnrec_lab.models import registry
from gnnrec_lab.models.registry import F32, LightGCNSpec, ModelSpec, model_spec
from gnnrec_lab.util.errors import ConfigError, UserError

COUNTS = dict(n_users=1000, n_items=2000, n_train=50_000)
HOST = dict(copy_GBps=30.0, triad_GBps=28.0, gather64_GBps=12.0, gather256_GBps=20.0, latency_ns=90.0,
            gemm_GFLOPs=150.0, threads=4, cpu="test", measured_at="fixed", kind="host", measured=True)
TINY = dict(dataset="synth-tiny", dim=16, layers=2, batch_size=512, epochs=1, max_steps_per_epoch=2, patience=0)


# -- models ---------------------------------------------------------------------------------------
def test_the_registry_and_configs_model_table_agree():
    assert tuple(registry.MODEL_SPECS) == config_run.MODELS == tuple(config_run.MODEL_GRAPHS)
    for name, spec in registry.MODEL_SPECS.items():
        assert spec.name == name and config_run.MODEL_GRAPHS[name] is spec.graph
    assert registry.graph_models() == ("lightgcn", "ngcf")
    assert not model_spec("mf").graph and model_spec("lightgcn").layer_mean


def test_every_hook_is_abstract_so_a_model_missing_one_cannot_be_declared():
    hooks = {"build", "parameters", "output_width", "edge_messages", "activation_bytes", "heap_step_bytes",
             "layer_kernels", "deferred_l2"}
    assert ModelSpec.__abstractmethods__ == hooks

    class Half(ModelSpec):
        name = "half"

        def build(self, config, n_users, n_items):
            return None
    with pytest.raises(TypeError, match="abstract"):
        Half()
    assert all(not getattr(type(s), "__abstractmethods__", None) for s in registry.MODEL_SPECS.values())
    assert isinstance(ModelSpec, abc.ABCMeta)


def test_register_refuses_a_second_declaration_and_a_nameless_model():
    with pytest.raises(ValueError, match="declared already"):
        registry.register(LightGCNSpec())

    class Nameless(LightGCNSpec):
        name = ""
    with pytest.raises(ValueError, match="no name"):
        registry.register(Nameless())
    with pytest.raises(TypeError):
        registry.register(LightGCNSpec)          # the class, not an instance
    with pytest.raises(ValueError, match="graph=False"):
        config_run.declare_model("mf", True)     # config keeps what a model is
    with pytest.raises(UserError, match="declared: lightgcn, ngcf, mf"):
        model_spec("nope")


def test_configs_model_rules_read_the_graph_flag():
    assert config_run.mf_layers("mf", 3) == 0 and config_run.mf_layers("ngcf", 3) == 3
    with pytest.raises(ConfigError, match="model 'mf' has no propagation layers; use 0, got 2"):
        RunConfig(model="mf", layers=2)
    with pytest.raises(ConfigError, match="allowed: lightgcn, ngcf, mf"):
        RunConfig(model="toy")                   # not registered (yet)


# -- a toy model, registered here ------------------------------------------------------------------
class ToySpec(LightGCNSpec):
    """LightGCN with one node tensor more kept for backward and a per-layer scaling kernel."""

    name = "toy"

    def __init__(self):
        self.built = []      # the modules training asked for

    def build(self, config, n_users, n_items):
        from gnnrec_lab.models.lightgcn import LightGCN

        class Toy(LightGCN):
            pass
        self.built.append(Toy(n_users, n_items, dim=config.dim, layers=config.layers, init_std=0.05))
        return self.built[-1]

    def activation_bytes(self, config, s, local):
        train, ev = super().activation_bytes(config, s, local)
        return train + s.node, ev

    def layer_kernels(self, config, phase, layer, s):
        return super().layer_kernels(config, phase, layer, s) + [
            registry.kernel_work("toy_scale", phase, layer, s.node, s.node, s.n * s.d, "stream")]


@pytest.fixture
def toy():
    spec = registry.register(ToySpec())
    yield spec
    registry.unregister("toy")
    assert "toy" not in config_run.MODEL_GRAPHS and "toy" not in registry.MODEL_SPECS


def test_a_registered_toy_model_validates_and_footprint_reads_its_hooks(toy):
    cfg = RunConfig(model="toy", layers=2, dim=16)
    ref = footprint_phases(RunConfig(model="lightgcn", layers=2, dim=16), COUNTS, runtime_bytes=0)
    got = footprint_phases(cfg, COUNTS, runtime_bytes=0)
    node = F32 * (COUNTS["n_users"] + COUNTS["n_items"]) * 16
    assert got["train"]["activations"] == ref["train"]["activations"] + node   # its own hook
    assert {k: v for k, v in got["train"].items() if k != "activations"} == \
           {k: v for k, v in ref["train"].items() if k != "activations"}
    assert config_run.mf_layers("toy", 2) == 2


def test_advise_reads_the_toy_models_kernel_hooks_and_covers_every_mode(toy):
    cfg = RunConfig(model="toy", layers=2, dim=16)
    names = [k["name"] for k in step_kernels(cfg, COUNTS)]
    assert names.count("toy_scale") == 2 * 2 and names.count("spmm") == 4     # forward + backward per layer
    a = advise(cfg, COUNTS, HOST, 16, runtime_bytes=0)
    assert a["config"]["model"] == "toy" and set(a["modes"]) == set(MEMORY_MODE_TABLE)
    assert all(r["modeled_kernel_s"] > 0 for r in a["modes"].values())


@pytest.mark.parametrize("mode", ["full", "sampled"])
def test_a_registered_toy_model_trains(toy, mode):
    extra = {"fanouts": (5, 5)} if mode == "sampled" else {}
    r = run(RunConfig(**TINY | {"model": "toy", "mode": mode} | extra))
    assert r.status == "finished" and np.isfinite(r.test["recall@20"])
    assert [type(m).__name__ for m in toy.built] == ["Toy"]       # its builder made the model
    fp = footprint(r.config, runtime_bytes=0)    # predicted with its hooks (the runtime: kernels compiled since)
    assert {k: v for k, v in r.footprint.predicted.items() if k != "runtime"} == \
           {k: v for k, v in fp.items() if k != "runtime"}


# -- memory modes -----------------------------------------------------------------------------------
def test_every_memory_mode_is_declared_once_with_a_shipped_device_of_the_right_kind(monkeypatch):
    from gnnrec_lab.memory import profiles
    monkeypatch.delenv(profiles.ENV_VAR, raising=False)
    shipped = profiles.load_profiles()
    assert config_run.MEMORY_MODES == tuple(MEMORY_MODE_TABLE) and config_run.MEMORY_MODES[0] == "dram"
    for name, m in MEMORY_MODE_TABLE.items():
        assert m.words.strip(), name   # how the mode reads in a sentence (the comparison's series names)
        assert m.name == name and m.placement in PLACEMENTS
        assert m.measured == (m.placement == "dram") == (m.device is None)
        assert mode_device(name) == m.device and ADVISED_MODE_DEVICES[name] == (m.device or "host")
        if m.measured:
            continue
        assert MODE_DEVICES[name] == m.device and m.device in shipped, f"{name}: no device profile {m.device}"
        # DRAM caching the device is the memory-mode kind of profile; a split places classes on a plain one
        assert shipped[m.device].is_memory_mode == (m.placement == "cache"), name
    assert set(MODE_DEVICES) == {n for n, m in MEMORY_MODE_TABLE.items() if not m.measured}


def test_advise_places_each_mode_as_its_declaration_says():
    a = advise(RunConfig(layers=1, dim=8), COUNTS, HOST, 16, runtime_bytes=0)
    for name, row in a["modes"].items():
        kind = MEMORY_MODE_TABLE[name].placement
        where = set(row["placement"].values())
        assert where == {"dram": {"dram"}, "cache": {"memory_mode"}}.get(kind, where), name
        assert ("keep_in_dram" in row) == (kind == "split"), name


def test_a_second_measured_memory_mode_is_measured_everywhere(monkeypatch):
    """Views ask the table (memory_mode_of(...).measured), not the name "dram": a second measured
    mode is measured in RunConfig, the tier model, the labels and the advice's recommendation."""
    from gnnrec_lab.config.memory_modes import DEFAULT_MEMORY_MODE, MemoryMode, memory_mode_of
    from gnnrec_lab.memory.advise import recommend
    from gnnrec_lab.memory.tiermodel import mode_label
    monkeypatch.setitem(MEMORY_MODE_TABLE, "hbm", MemoryMode("hbm", None, "dram", "HBM", "HBM", "#e377c2"))
    assert memory_mode_of({"memory_mode": "hbm"}).measured and mode_device("hbm") is None
    assert mode_label("hbm") == "hbm (measured)"
    assert recommend({"hbm": {"fits": True, "modeled_kernel_s": 1.0}}, True)[1].startswith("fits in DRAM")
    assert memory_mode_of(None) is DEFAULT_MEMORY_MODE and memory_mode_of(float("nan")) is DEFAULT_MEMORY_MODE
    assert RunConfig().memory_mode == DEFAULT_MEMORY_MODE.name
    with pytest.raises(ConfigError, match="memory_mode: got 'ssd'"):
        memory_mode_of({"memory_mode": "ssd"})


# Machado, Oliveira and Fernandes (2009) at full severity, on linear RGB: how each colour looks to a
# reader with deuteranopia, protanopia or tritanopia.
VISIONS = {"normal": np.eye(3),
           "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                                     [-0.011820, 0.042940, 0.968881]]),
           "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                                   [-0.003882, -0.048116, 1.051998]]),
           "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                                   [0.004733, 0.691367, 0.303900]])}


def _lab(color: str, vision) -> np.ndarray:
    """CIELAB of ``#rrggbb`` as seen with ``vision`` (sRGB, D65)."""
    c = np.array([int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    lin = np.clip(vision @ np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4), 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    f = np.cbrt(np.maximum(xyz / np.array([0.95047, 1.0, 1.08883]), 0.008856))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_every_memory_mode_has_its_own_colour_and_short_label_apart_for_colour_blind_readers_too():
    from gnnrec_lab.config.memory_modes import UNKNOWN_MODE_COLOR, MemoryMode, mode_look
    modes = list(MEMORY_MODE_TABLE.values())
    shorts = [m.short for m in modes]
    assert all(s and len(s) <= 12 for s in shorts) and len(set(shorts)) == len(modes), shorts
    colors = [m.color.lower() for m in modes] + [UNKNOWN_MODE_COLOR.lower()]
    assert len(set(colors)) == len(colors), colors
    # delta E (CIE76) of every pair, the unknown grey included, for each vision: 15 is well past "just
    # noticeable" (~2.3); the closest pair in the table is ~18 (Optane AD and CXL, tritanopia)
    close = [(a, b, v, round(float(np.linalg.norm(_lab(a, m) - _lab(b, m))), 1))
             for v, m in VISIONS.items() for i, a in enumerate(colors) for b in colors[i + 1:]
             if np.linalg.norm(_lab(a, m) - _lab(b, m)) < 15]
    assert not close, close
    assert mode_look("optane_app_direct") == ("Optane AD", "#2ca02c", "optane_app_direct")
    assert mode_look({"memory_mode": "pmem_v0"}) == ("pmem_v0", UNKNOWN_MODE_COLOR, "pmem_v0")
    assert mode_look(None).name == mode_look(float("nan")).name == "dram"
    with pytest.raises(ValueError, match="color must be #rrggbb"):
        MemoryMode("hbm", None, "dram", "HBM", "HBM", "pink")


def test_no_view_compares_a_memory_mode_with_the_name_dram():
    import pathlib
    import re
    pkg = pathlib.Path(config_run.__file__).resolve().parents[1]
    pattern = re.compile(r"""\bmemory_mode\b[^\n]*["']dram["']|["']dram["'][^\n]*\bmemory_mode\b"""
                         r"""|mode\s*[!=]=\s*["']dram["']""")
    hits = [f"{p.relative_to(pkg)}:{i}" for p in pkg.rglob("*.py") if p.name != "memory_modes.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_no_view_keeps_a_dict_keyed_by_memory_mode_names():
    """Colours, labels and devices of a mode are read from the table (config.memory_modes): no
    package module or benchmark writes a dict literal keyed by a mode's name ("dram" alone is also a
    place kind, as in advise's {"dram": [...], "device": [...]}, so it counts only beside another mode)."""
    import ast
    import pathlib
    pkg = pathlib.Path(config_run.__file__).resolve().parents[1]
    names = set(MEMORY_MODE_TABLE)
    files = [p for p in pkg.rglob("*.py") if p.name != "memory_modes.py"]
    files += sorted((pkg.parent / "benchmarks").glob("*.py"))
    hits = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if keys & names - {"dram"}:
                    hits.append(f"{p.name}:{node.lineno}")
    assert not hits, hits


def test_a_model_registered_at_run_time_is_offered_everywhere_with_its_own_options(toy, store, monkeypatch):
    """The toy model (registered after every module was imported) is in --model's help, the Launch
    form's choices and DistDGL's models; a field it declares its own (here NGCF's form, borrowed)
    is shown on the form with it, offered by advise, and part of its shape for the DRAM reference."""
    from gnnrec_lab.commands.cli import build_parser
    from gnnrec_lab.dashboard.common import Lab
    from gnnrec_lab.dashboard.launch import LaunchForm, LaunchPage
    from gnnrec_lab.distributed.spec import MODELS as DIST_MODELS
    from gnnrec_lab.services.projection import _same_shape
    monkeypatch.setattr(toy, "options", {"ngcf_form": config_run.OPTIONS["ngcf_form"]}, raising=False)
    monkeypatch.setattr(toy, "shape_keys", ("ngcf_form",), raising=False)
    assert "toy" in config_run.FIELD_DOCS["model"].help
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "lightgcn, ngcf, mf, toy" in " ".join(run_help.split())
    assert "toy" in LaunchForm().param["model"].objects and "toy" in DIST_MODELS
    page = LaunchPage(Lab(store=store, runner=None))
    page.form.model = "lightgcn"
    assert not page.widgets["ngcf_form"].visible
    page.form.model = "toy"
    assert page.widgets["ngcf_form"].visible
    advise_help = build_parser()._subparsers._group_actions[0].choices["advise"].format_help()
    assert "--ngcf-form" in advise_help
    cfg = RunConfig(model="toy", ngcf_form="node", layers=2)
    row = dict(cfg.to_dict(), ngcf_form="edge")
    assert not _same_shape(row, cfg) and _same_shape(cfg.to_dict(), cfg)
    assert registry.shape_keys("toy") == ("ngcf_form",) and registry.shape_keys("nope") == ()


class ToyWithOptionSpec(ToySpec):
    """The toy model with an option of its own, declared on its spec alone."""

    name = "toy_opt"
    options = {"toy_scale": config_run.model_option(
        2, Interval(integer, lo=1, hi=8), label="Toy scale", help="how many times the toy scales its rows")}


def test_a_models_own_option_declared_on_its_spec_alone_is_a_run_option_everywhere(tmp_path):
    """A model with an option of its own touches its spec only: registering it makes the option a
    RunConfig keyword and attribute, a --flag of run, sweep and advise with its words, a Launch form
    field shown with the model, a field of run files, stored flat and read back; unregistering it
    removes it."""
    from gnnrec_lab.commands.cli import build_parser
    from gnnrec_lab.commands.common import config_from_args
    registry.register(ToyWithOptionSpec())
    try:
        cfg = RunConfig(model="toy_opt", toy_scale=5, layers=2)
        assert cfg.toy_scale == 5 and RunConfig().toy_scale == 2 and cfg.replace(dim=8).toy_scale == 5
        assert cfg.to_dict()["toy_scale"] == 5 and RunConfig.from_dict(cfg.to_dict()) == cfg
        assert RunConfig.from_dict(json.loads(cfg.to_json())) == cfg
        with pytest.raises(ConfigError) as e:
            RunConfig(model="toy_opt", toy_scale=9)
        assert e.value.param == "toy_scale" and "8" in str(e.value)
        assert config_run.MAXIMA["toy_scale"] == 8 and list(config_run.OPTIONS).index("toy_scale") < \
            list(config_run.OPTIONS).index("layers")
        parser = build_parser()
        for command in ("run", "sweep", "advise"):
            text = " ".join(parser._subparsers._group_actions[0].choices[command].format_help().split())
            assert "--toy-scale" in text, command
        assert "how many times the toy scales its rows (default: 2)" in \
            " ".join(parser._subparsers._group_actions[0].choices["run"].format_help().split())
        args = parser.parse_args(["run", "--model", "toy_opt", "--toy-scale", "3", "--layers", "2"])
        assert config_from_args(args).toy_scale == 3
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "--toy-scale", "0"])
        from gnnrec_lab.dashboard.common import Lab
        from gnnrec_lab.dashboard.launch import LaunchPage
        page = LaunchPage(Lab(store=None, runner=None))
        assert not page.widgets["toy_scale"].visible and page.widgets["toy_scale"].name == "Toy scale"
        page.form.param.update(model="toy_opt", layers=2)
        assert page.widgets["toy_scale"].visible and page.form.result()[0].toy_scale == 2
        page.widgets["toy_scale"].value = 6
        assert page.form.result()[0].toy_scale == 6
        page.widgets["toy_scale"].value = 99
        assert page.form.result()[1].param == "toy_scale" and page.errors["toy_scale"].visible
        f = tmp_path / "run.yaml"
        f.write_text("model: toy_opt\ntoy_scale: 4\nlayers: 2\n")
        fields, lines = config_run.read_config_file(f)
        assert RunConfig.from_dict(fields).toy_scale == 4 and lines["toy_scale"] == 2
    finally:
        registry.unregister("toy_opt")
    assert "toy_scale" not in config_run.OPTIONS and "toy_scale" not in config_run.RUN_CONSTRAINTS
    with pytest.raises(TypeError):
        RunConfig(toy_scale=3)


def test_a_stored_ngcf_run_reads_back_with_its_form():
    """ngcf_form is NGCF's own option (its spec declares it), stored flat as before."""
    stored = dict(RunConfig().to_dict(), model="ngcf", ngcf_form="node")
    cfg = RunConfig.from_dict(stored)
    assert cfg.ngcf_form == "node" and cfg.model_options == {"ngcf_form": "node"} and cfg.to_dict() == stored
    assert "ngcf_form" not in {f.name for f in __import__("dataclasses").fields(RunConfig)}
    assert "ngcf_form" in model_spec("ngcf").options and "ngcf_form" in registry.model_options()


def test_register_refuses_an_option_that_is_a_field_or_not_a_record():
    class Bad(ToySpec):
        name = "bad_opt"
        options = {"dim": config_run.model_option(1, Interval(integer, lo=1), label="x", help="x")}
    with pytest.raises(ValueError, match="dim"):
        registry.register(Bad())
    Bad.options = {"bad": ("edge",)}
    with pytest.raises(ValueError, match="options"):
        registry.register(Bad())
    assert "bad_opt" not in registry.MODEL_SPECS and "bad_opt" not in config_run.MODEL_GRAPHS
