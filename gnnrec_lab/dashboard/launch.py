"""Launch page: a RunConfig form, what the run will need, and the Launch button.

The form's state is a :class:`LaunchForm` (one ``param`` per RunConfig field a
person usually changes). ``RunConfig`` itself validates; its ``ConfigError``
names the field, and the message is shown under that widget while the Launch
button stays disabled. Before launching, the page shows the predicted footprint
the run will hold in DRAM (modeled, the number the pre-flight check holds against
the limit that applies: the memory available now or the run's memory limit) and,
where finished DRAM runs of the same shape exist in the store, the fastest one's
measured step time next to the step time the tier model projects for each other
memory device (marked *modeled*), with the spread of those runs and the placement
the projection assumes. The engine is the lab's own process (full graph or sampled) or DistDGL on
a local cluster of ``partitions`` machines (sampled mode; the runner starts it in the DGL lane,
:func:`gnnrec_lab.distributed.engine.runner_request`).
"""
from __future__ import annotations

from typing import Optional

import pandas as pd
import panel as pn
import param

from gnnrec_lab.config.run import (
    OPTIONS,
    TENSOR_CLASSES,
    RunConfig,
    field_label,
    option_type,
)
from gnnrec_lab.dashboard.common import (
    MODELED_NOTE,
    OVERLOADED_LABEL,
    Lab,
    hatch_hook,
    modeled_bars,
    not_available,
    safe_call,
)
from gnnrec_lab.dashboard.forms import FieldKind, add_fields, form_class, form_widgets
from gnnrec_lab.dashboard.security import launch_policy
from gnnrec_lab.data import describe, list_datasets
from gnnrec_lab.distributed.engine import runner_request
from gnnrec_lab.distributed.spec import MAX_PARTITIONS
from gnnrec_lab.memory.advise import ALL_IN_DRAM, assumption_text, cache_note, cached_placement
from gnnrec_lab.memory.placement import file_placed
from gnnrec_lab.memory.preflight import memory_verdict
from gnnrec_lab.memory.profiles import load_profiles
from gnnrec_lab.memory.tiermodel import dram_residency, mode_device, mode_label
from gnnrec_lab.models.registry import model_options, model_spec
from gnnrec_lab.services.projection import (
    dram_reference,
    host_calibration,
    stored_run_step_time,
    tier_projection,
)
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.formatting import fmt_bytes, fmt_ms
from gnnrec_lab.util.provenance import Provenance

# The one-click example offered on a fresh install (small enough for two cores).
EXAMPLE_CONFIG = dict(dataset="ml-100k", model="lightgcn", layers=3, dim=64, batch_size=2048,
                      epochs=3, eval_users=500)
# Form fields shown as widgets, in order, the models' own options after the model (form_fields);
# placement gets one text box per tensor class.
_COMMON_FIELDS = ("layers", "dim", "batch_size", "epochs", "lr", "lr_rule", "optimizer", "memory_mode",
                  "device_profile", "backend", "precision", "max_steps_per_epoch", "eval_users", "patience", "seed",
                  "mode", "fanouts", "cache_policy", "cache_size", "cores")


def form_fields() -> tuple:
    """The form's fields now: a model registered after this module was imported brings its options."""
    return ("dataset", "model", *model_options(), *_COMMON_FIELDS)


def run_field(name: str) -> FieldKind:
    """RunConfig option ``name`` as a form field: its record and type."""
    return (OPTIONS[name], *option_type(name))


FORM_FIELDS = form_fields()   # the built-in models' (tests and the views' dependencies read it)
# The error pane at the Launch button, for what is not one field's mistake.
FORM = "form"
# Who trains a run launched from the page: the lab's own worker, or DistDGL on a local cluster.
ENGINES = {"this machine (full graph or sampled)": "lab", "DistDGL (a local cluster of machines)": "distdgl"}


def error_text(err) -> str:
    """How a form error reads on the page: a field's error names its field; one that is not tied to a
    field (shown at the button) reads as its message alone."""
    text = str(err)
    if getattr(err, "param", None) == FORM and text.startswith(f"{FORM}: "):
        return text[len(FORM) + 2:]
    return text


def profile_names() -> list[str]:
    """Device profiles a modeled memory mode may use instead of its default (the tier model's)."""
    names, _ = safe_call(lambda: sorted(n for n, p in load_profiles().items()
                                        if getattr(p, "kind", None) not in ("dram", "host")), default=[])
    return names or []


def parse_fanouts(text) -> tuple:
    """The fan-outs box ("10,10,10", first hop first) as a tuple; ConfigError naming fanouts."""
    if isinstance(text, (tuple, list)):
        return tuple(text)
    try:
        return tuple(int(p) for p in str(text).replace(" ", "").split(",") if p)
    except ValueError:
        raise ConfigError("fanouts", f"expected comma-separated integers such as 10,10,10, got {text!r}") from None


def dataset_names() -> tuple[list[str], Optional[str]]:
    """Names of the datasets the data registry knows (prepared first), or ``([], reason)``."""
    rows, why = safe_call(list_datasets, default=[])
    if why:
        return [], why
    rows = sorted(rows or [], key=lambda r: (not r.get("prepared", False), str(r.get("name"))))
    return [str(r["name"]) for r in rows if "name" in r], None


def tensor_class_label(cls: str) -> str:
    """How a tensor class reads on a form: ``edge_intermediates`` -> "Edge intermediates"."""
    return cls.replace("_", " ").capitalize()


# The choices of the form's fields that take one of a list (their options' own lists).
FORM_CHOICES = {k: OPTIONS[k].choices for k in FORM_FIELDS if OPTIONS[k].choices is not None}
# Where the form starts from another value than RunConfig's: a first run from the page stays short.
FORM_DEFAULTS = {"epochs": 5}


# Optional text fields (device_profile): their None is an empty box on the form.
OPTIONAL_TEXT = tuple(k for k in FORM_FIELDS if k not in FORM_CHOICES and option_type(k) == (str, True))


# The form's fields as parameters, made from RunConfig's options (LaunchForm adds what follows from them).
RunConfigFields = form_class("RunConfigFields", {k: run_field(k) for k in (*FORM_FIELDS, "placement")},
                             FORM_DEFAULTS)


class LaunchForm(RunConfigFields):
    """The launch form's state: :data:`FORM_FIELDS` and the placement, each a parameter made from
    its RunConfig field (:func:`form_parameter`), and the run's name (RunConfig's ``name``, held as
    ``run_name``: every Parameterized has a ``name`` of its own). ``config``/``error`` follow from the
    fields."""

    run_name = param.String(default="", doc=OPTIONS["name"].help)

    def __init__(self, **params):
        # the fields and choices as the options hold them now: a model registered after this module
        # was imported is offered, with its own options
        add_fields(self, {k: run_field(k) for k in form_fields()})
        super().__init__(**params)
        for k in form_fields():
            if OPTIONS[k].choices is not None:
                self.param[k].objects = list(OPTIONS[k].choices)

    def values(self) -> dict:
        """The form as RunConfig field values (ConfigError when the fan-outs box does not parse):
        an empty optional text box is None."""
        d = {k: getattr(self, k) for k in form_fields()}
        d["placement"] = {k: v for k, v in (self.placement or {}).items() if v}
        d.update({k: d[k] or None for k in OPTIONAL_TEXT})
        d["fanouts"] = parse_fanouts(d["fanouts"])
        d["name"] = self.run_name or None   # an empty box: no name
        return d

    @param.depends(*FORM_FIELDS, "placement", "run_name")
    def result(self) -> tuple[Optional[RunConfig], Optional[ConfigError]]:
        """``(config, None)`` when the form is valid, else ``(None, error)``."""
        try:
            values = self.values()
        except ConfigError as e:
            return None, e
        return config_from_values(values)

    def set_from(self, config: RunConfig) -> None:
        values = {k: getattr(config, k) for k in form_fields()}
        values.update({k: values[k] or "" for k in OPTIONAL_TEXT})
        values.update(fanouts=",".join(str(f) for f in config.fanouts))
        self.param.update(**values, placement=dict(config.placement), run_name=config.name or "")


def config_from_values(values: dict) -> tuple[Optional[RunConfig], Optional[ConfigError]]:
    """Build a RunConfig from form values; a user mistake comes back as a ConfigError."""
    try:
        return RunConfig.from_dict(values), None
    except ConfigError as e:
        return None, e
    except UserError as e:  # not tied to a field: show it at the button
        return None, ConfigError(FORM, str(e))
    except (TypeError, ValueError) as e:
        return None, ConfigError(FORM, str(e))


def distdgl_request(config: RunConfig, partitions: int) -> tuple[Optional[dict], Optional[ConfigError]]:
    """``(the runner's arguments for a DistDGL run of config, None)``, or ``(None, error)``: a field
    DistDGL cannot take is that field's error, anything else (no DGL to run in) the engine's."""
    try:
        return runner_request(config, partitions), None
    except ConfigError as e:
        return None, (e if e.param in form_fields() else ConfigError("engine", str(e)))
    except UserError as e:
        return None, ConfigError("engine", str(e))


def memory_prediction(config: RunConfig) -> tuple[Optional[dict], Optional[str]]:
    """:func:`~gnnrec_lab.memory.preflight.memory_verdict` of ``config`` under this dashboard's launch
    policy: the predicted DRAM bytes (modeled), by class, and the limit that applies (the same
    numbers the Launch button's pre-flight check uses), or ``(None, reason)``."""
    counts, why = safe_call(describe, config.dataset, data_dir=config.data_dir)
    if counts is None:
        return None, why
    return safe_call(memory_verdict, config, counts, memory_limit_bytes=launch_policy().memory_limit_bytes)


#: Above this many times the prediction the limit is not drawn on the bar's scale (the bar would be
#: a sliver at its foot: 26 MiB on a 0-18 GiB axis) but named at the top of the chart.
LIMIT_ON_SCALE = 4.0


def memory_chart(v: dict):
    """The predicted DRAM bytes stacked by tensor class in one bar (modeled, hatched), on an axis that
    shows it (MiB or GiB), with the limit that applies: a red dashed line on the same axis when it is
    within :data:`LIMIT_ON_SCALE` times the bar, else named in red at the top with how far above it is."""
    import holoviews as hv
    off = set(file_placed(getattr(v.get("config"), "placement", {}) or {}))
    fp = {k: b for k, b in v["footprint"].items() if k != "runtime" and k not in off and b > 0}
    pred, limit = float(v["dram_bytes"]), float(v["limit_bytes"])
    on_scale = limit <= LIMIT_ON_SCALE * max(pred, 1.0)
    top = (max(pred, limit) * 1.15) if on_scale else pred * 1.45
    unit, div = ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)
    what = "predicted in DRAM (modeled)"
    df = pd.DataFrame({"what": what, "tensor_class": list(fp), unit: [b / div for b in fp.values()]})
    bars = hv.Bars(df, ["what", "tensor_class"], unit).opts(
        stacked=True, responsive=True, height=300, tools=["hover"], hooks=[hatch_hook(Provenance.MODELED)],
        ylim=(0, top / div), ylabel=unit, xlabel="", legend_position="right",
        title=f"Predicted DRAM use (modeled) vs the {v['limit_name']}")
    label = f"{v['limit_name']}: {fmt_bytes(limit)}"
    if on_scale:
        line = hv.HLine(limit / div).opts(color="red", line_dash="dashed", line_width=2)
        note = hv.Text(what, limit / div, label, valign="bottom").opts(color="red", text_font_size="10pt")
        return bars * line * note
    note = hv.Text(what, top / div * 0.97, f"{label}\n= {limit / max(pred, 1.0):,.0f}x the prediction,\n"
                   f"far above this scale", valign="top").opts(color="red", text_font_size="9pt")
    return bars * note


def reference_runs(lab: Lab, config: RunConfig) -> tuple[Optional[dict], Optional[str]]:
    """:func:`~gnnrec_lab.services.projection.dram_reference` for ``config`` (the fastest stored DRAM run of
    its shape and the spread of them all), or ``(None, reason)``; ``(None, None)`` when there is none."""
    host, why = host_calibration()
    if host is None:
        return None, why
    return safe_call(dram_reference, lab.store, config, host)


def spread_text(ref: dict) -> str:
    """Which stored DRAM runs of the shape there are, how far apart they measured, which one predicts."""
    runs = ", ".join(f"#{r['run_id']} {fmt_ms(r['measured_s'])}" + (f" ({OVERLOADED_LABEL})" if r["overloaded"] else "")
                     for r in ref["runs"])
    n = len(ref["runs"])
    spread = (f"they measured {fmt_ms(ref['min_s'])} to {fmt_ms(ref['max_s'])} of kernel time per step "
              f"(median {fmt_ms(ref['median_s'])}): " if n > 1 else "")
    return (f"{n} stored DRAM run{'s' if n > 1 else ''} of this shape ({runs}); {spread}predicted from the "
            f"**fastest**, run **#{ref['run_id']}** ({fmt_ms(ref['measured_s'])} kernel time per step, measured), "
            f"because load "
            f"from other work only ever adds time.")


def assumptions(store, run_id: int, df: pd.DataFrame, placement: dict) -> dict:
    """``{device: what its number assumes}`` for the rows of a tier projection of ``run_id`` (under
    the form's ``placement``), in the words ``gnnrec-lab advise`` prints beside each memory mode
    (:func:`~gnnrec_lab.memory.advise.assumption_text`): the kind and the placement, and for a device
    whose DRAM caches it (Memory Mode) the DRAM's size and the modeled hit rate
    (:func:`~gnnrec_lab.memory.advise.cache_note`, the projection's own: the profile's DRAM over the
    run's predicted footprint)."""
    host, _ = host_calibration()
    profiles, _ = safe_call(load_profiles, default={})
    words = df.attrs.get("placement_assumption") or ""
    out = {}
    for device, kind in zip(df["device"], df["kind"]):
        if kind == Provenance.MEASURED:
            out[device] = assumption_text(kind, ALL_IN_DRAM)
            continue
        prof = (profiles or {}).get(device)
        cache = getattr(prof, "dram_cache_bytes", None) if getattr(prof, "kind", "").endswith("memory_mode") else None
        if not cache or host is None:
            out[device] = assumption_text(kind, words)
            continue
        st, _ = safe_call(stored_run_step_time, store, run_id, host, device=device, placement=placement or None)
        hit = (st or {}).get("hit_rate")
        out[device] = assumption_text(kind, cached_placement(words)) + (
            f" {cache_note(cache, hit)}" if hit is not None else "")
    return out


def mode_note(memory_mode: str) -> str:
    """The line under the memory-mode widget: measured here, or modeled on which device profile."""
    label, _ = safe_call(mode_label, memory_mode)
    if not label:
        return ""
    if mode_device(memory_mode) is None:   # measured (dram): config.memory_modes
        return f"*{label} on this host*"
    return f"*{label}: kernels run on this host's DRAM, their step time is projected (modeled)*"


class LaunchPage(pn.viewable.Viewer):
    """Form + predictions + Launch; on a fresh store also a one-click example run."""

    lab = param.ClassSelector(class_=Lab)
    form = param.ClassSelector(class_=LaunchForm)
    message = param.String(default="")
    engine = param.Selector(default="lab", objects=list(ENGINES.values()),
                            doc="who trains the run: this machine's worker, or DistDGL on a local cluster of machines "
                                "(sampled mode; needs the DGL lane, `make dgl`)")
    partitions = param.Integer(default=2, bounds=(2, MAX_PARTITIONS),
                               doc="DistDGL: machines of the local cluster, one graph partition each")

    def __init__(self, lab: Lab, **params):
        params.setdefault("form", LaunchForm())
        super().__init__(lab=lab, **params)
        names, self._datasets_reason = dataset_names()
        overrides = {"device_profile": {"type": pn.widgets.Select,
                                        "options": {"the memory mode's default": "",
                                                    **{n: n for n in profile_names()}}},
                     "lr": {"step": 1e-4, "format": "0.[00000]"}}
        if names:
            if self.form.dataset not in names:
                self.form.dataset = names[0]
            overrides["dataset"] = {"type": pn.widgets.Select, "options": names}
        self.fields = form_fields()
        self.widgets = form_widgets(self.form, {k: run_field(k) for k in self.fields}, overrides, prefix="launch")
        self.engine_widgets = {
            "engine": pn.widgets.Select.from_param(self.param.engine, options=ENGINES, name="Engine",
                                                   description=self.param.engine.doc),
            "partitions": pn.widgets.IntInput.from_param(self.param.partitions, name="Machines (DistDGL)",
                                                         description=self.param.partitions.doc)}
        for k, w in self.engine_widgets.items():
            w.width = 250   # room for the labels in words, as the form's
            w.css_classes = [f"launch-{k}"]  # stable hooks for the browser tests
        self.placement_inputs = {
            cls: pn.widgets.TextInput(name=tensor_class_label(cls), placeholder="dram (default)",
                                      description=f"where the {cls.replace('_', ' ')} tensors live: dram, file:DIR "
                                                  f"(a memory-mapped file in DIR) or numa:POLICY:NODES (default: dram)",
                                      value=self.form.placement.get(cls, ""))
            for cls in TENSOR_CLASSES}
        for w in self.placement_inputs.values():
            w.param.watch(self._placement_changed, "value")
        name = OPTIONS["name"]
        self.name_widget = pn.widgets.TextInput.from_param(
            self.form.param.run_name, name=name.label, description=name.described(), width=250,
            placeholder="optional (rename later: gnnrec-lab runs rename)", css_classes=["launch-name"])
        self.errors = {k: pn.pane.Markdown("", styles={"color": "#c62828"}, margin=(0, 10), visible=False, width=250,
                                           css_classes=[f"launch-error-{k}"])
                       for k in ["name", *self.fields, "placement", "engine", FORM]}
        self.button = pn.widgets.Button(name="Launch run", button_type="primary", disabled=True,
                                        css_classes=["launch-button"])
        self.button.on_click(self._on_launch)
        self.example_button = pn.widgets.Button(name="Run an example: ml-100k LightGCN, 3 layers, dim 64, 3 epochs",
                                                button_type="success")
        self.example_button.on_click(self._on_example)
        self.status_md = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.mode_note = pn.pane.Markdown(pn.bind(mode_note, self.form.param.memory_mode), width=250, margin=(0, 10))
        self.request: Optional[dict] = None   # the runner's arguments for a DistDGL run (runner_request)
        self.engine_error: Optional[ConfigError] = None   # why the form's DistDGL run cannot be launched
        self.form.param.watch(self._refresh_validity, list(self.fields) + ["placement", "run_name"])
        self.param.watch(self._refresh_validity, ["engine", "partitions"])
        self._refresh_validity()

    # -- events ---------------------------------------------------------------
    def _placement_changed(self, _event=None):
        self.form.placement = {c: w.value.strip() for c, w in self.placement_inputs.items() if w.value.strip()}

    def _refresh_validity(self, *_):
        cfg, err = self.form.result()
        if cfg is not None and self.lab.runner is not None:
            # the launch policy (file: directories) and the pre-flight footprint check: Launch
            # stays disabled and the reason shows at the button
            refused, failed = safe_call(self.lab.launch_error, cfg, include_active=False,
                                        own_process=self.engine != "distdgl")
            if failed or refused is not None:
                # a refusal naming one of the form's fields shows there, any other at the button
                on_field = isinstance(refused, ConfigError) and refused.param in self.errors
                cfg, err = None, (refused if on_field else ConfigError(FORM, failed or str(refused)))
        self.request = None
        if cfg is not None and self.engine == "distdgl":
            # DistDGL's own checks (sampled mode, the fields it can honour, a DGL to run in): shown at
            # the engine, Launch disabled until they pass
            self.request, err = distdgl_request(cfg, self.partitions)
            if err is not None:
                cfg = None
        self.engine_error = err if self.engine == "distdgl" else None
        for k, pane in self.errors.items():
            hit = err is not None and (err.param == k or (k == FORM and err.param not in self.errors))
            pane.object = f"⚠ {error_text(err)}" if hit else ""
            pane.visible = hit
        # fields that mean something only with another's value are shown with it
        sampled = self.form.mode == "sampled"
        modeled = mode_device(self.form.memory_mode) is not None
        own = safe_call(lambda: model_spec(self.form.model).options, default=())[0]
        shown = {**{k: k in own for k in model_options()}, "device_profile": modeled, "fanouts": sampled,
                 "cache_policy": sampled, "cache_size": sampled and self.form.cache_policy not in ("none", "stream")}
        for k, visible in shown.items():
            self.widgets[k].visible = visible or self.errors[k].visible
        self.engine_widgets["partitions"].visible = self.engine == "distdgl"
        self.button.disabled = cfg is None or self.lab.runner is None

    def launch(self, config: Optional[RunConfig] = None):
        """Launch ``config`` (default: the form's, with the engine chosen) through the runner; return
        the run id or None. A ``config`` given (the example run) runs on this machine."""
        request = None
        if config is None:
            config, err = self.form.result()
            if config is not None and self.engine == "distdgl":
                request, err = self.request, self.engine_error   # made by the form's check
                if request is None:
                    config = None
            if config is None:
                self.message = f"Not launched: {error_text(err)}"
                self.status_md.object = self.message
                return None
        try:
            run_id = self.lab.launch(config, request=request)
        except UserError as e:
            self.message = f"Not launched: {e}"
        except Exception as e:  # the runner failing must not take the page down
            self.message = f"Not launched: {type(e).__name__}: {e}"
        else:
            named = f" ({config.name})" if config.name else ""
            self.message = f"Launched run **#{run_id}**{named} — follow it on the **Live** page."
            self.lab.page = "Live"
            self.status_md.object = self.message
            return run_id
        self.status_md.object = self.message
        return None

    def _on_launch(self, _event):
        self.launch()

    def _on_example(self, _event):
        cfg, err = config_from_values(EXAMPLE_CONFIG)
        if cfg is None:
            self.status_md.object = f"Example not launched: {error_text(err)}"
            return
        self.form.set_from(cfg)
        self.launch(cfg)

    # -- views ------------------------------------------------------------------
    @param.depends(*[f"form.{k}" for k in FORM_FIELDS], "form.placement")
    def predictions(self):
        cfg, err = self.form.result()
        if cfg is None:
            return pn.pane.Markdown("*Fix the form to see predictions.*")
        return pn.Column(self._footprint_view(cfg), self._step_time_view(cfg), sizing_mode="stretch_width")

    def _footprint_view(self, cfg: RunConfig):
        v, why = memory_prediction(cfg)
        if v is None:
            return not_available("Predicted memory (memory package)", why)
        v["config"] = cfg
        fits = "fits within" if v["fits"] else "**exceeds**"
        note = pn.pane.Markdown(
            f"Predicted **{fmt_bytes(v['dram_bytes'])}** in DRAM (modeled: every tensor class not placed on "
            f"`file:`, the interpreter left out) {fits} the **{fmt_bytes(v['limit_bytes'])}** of the "
            f"{v['limit_name']} (in red on the chart), the limit the Launch button checks."
            + ("" if v["fits"] else f" Largest: {v['largest']} ({fmt_bytes(v['largest_bytes'])}, set by "
                                    f"{v['driver']}): lower it or place classes on `file:DIR`.")
            + f"\n\n{dram_residency(cfg.memory_mode, dict(cfg.placement), cfg.device_profile)}",
            css_classes=["launch-memory-note"], sizing_mode="stretch_width")
        return pn.Column(note, pn.pane.HoloViews(memory_chart(v), sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")

    def _step_time_view(self, cfg: RunConfig):
        if self.lab.store is None:
            return not_available("Kernel-time prediction (run store)", self.lab.store_reason)
        ref, why = reference_runs(self.lab, cfg)
        if why:
            return not_available("Kernel-time prediction (stored DRAM runs)", why)
        if ref is None:
            return pn.pane.Markdown(
                "*Predicted kernel time per step per memory mode*: no finished DRAM run with this dataset, model, "
                "depth, dim, batch size, mode and backend yet — launch one on `dram`; the tier model then "
                "projects its measured kernels onto Optane, CXL and remote NUMA (modeled).")
        df, why = tier_projection(self.lab.store, ref["run_id"], placement=dict(cfg.placement))
        if df is None:
            return not_available("Kernel-time prediction (memory tier model)", why)
        own = mode_device(cfg.memory_mode, cfg.device_profile)
        lines = [spread_text(ref), f"The modeled bars assume **{df.attrs.get('placement_assumption')}** (the "
                                   f"form's placement; `gnnrec-lab advise` also shows the advised split).",
                 MODELED_NOTE]
        said = assumptions(self.lab.store, ref["run_id"], df, dict(cfg.placement))
        row = df[df["device"] == own] if own else df[df["kind"] == Provenance.MEASURED]
        if not row.empty:
            lines.append(f"This run ({mode_label(cfg.memory_mode, cfg.device_profile)}): "
                         f"**{fmt_ms(row['seconds'].iloc[0])} kernel time per step ({row['kind'].iloc[0]})** "
                         f"{said.get(row['device'].iloc[0], '')}")
        each = "\n".join(f"- {d}: {fmt_ms(t)} kernel time per step ({k}) {said.get(d, '')}"
                         for d, t, k in zip(df["device"], df["seconds"], df["kind"]))
        return pn.Column(
            pn.pane.Markdown("\n\n".join(lines), css_classes=["launch-step-note"], sizing_mode="stretch_width"),
            pn.pane.HoloViews(modeled_bars(df, "device", "seconds", "kernel s per step"),
                              sizing_mode="stretch_width"),
            pn.pane.Markdown("Each number and what it assumes (in `gnnrec-lab advise`'s words):\n\n" + each,
                             css_classes=["launch-assumptions"], sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

    @param.depends("lab.runs")
    def fresh_install(self):
        # run ids only: the page opens fast however many runs the store holds
        ids, _ = safe_call(self.lab.store.run_ids, default=[]) if self.lab.store is not None else ([], None)
        if self.lab.store is None or ids:
            return pn.Spacer(height=0)
        if self.lab.runner is None:
            return pn.Spacer(height=0) if self.lab.read_only else not_available("The example run (runner)",
                                                                                 self.lab.runner_reason)
        return pn.Column(pn.pane.Markdown("### No runs yet\nStart with a small example run "
                                          "(about a minute on two cores), then watch it on the Live page."),
                         self.example_button, sizing_mode="stretch_width")

    def __panel__(self):
        fields = [pn.Column(self.name_widget, self.errors["name"], margin=0, width=270)]
        fields += [pn.Column(self.widgets[k], self.errors[k], *([self.mode_note] if k == "memory_mode" else []),
                             margin=0, width=270) for k in self.fields]
        # The card's inputs are built into the page when it is first opened: a collapsed card
        # still sends every child to the browser, which slows the first page load.
        placement = pn.Card(title=field_label("placement"), collapsed=True, sizing_mode="stretch_width")

        def fill(event):
            if not event.new and not placement.objects:
                placement.objects = [self.placement_inputs[c] for c in TENSOR_CLASSES]
        placement.param.watch(fill, "collapsed")
        notes = []
        if self._datasets_reason:
            notes.append(not_available("Dataset list (data registry)", self._datasets_reason))
        if self.lab.store is None:
            notes.append(not_available("Run store", self.lab.store_reason))
        elif self.lab.read_only:
            notes.append(pn.pane.Alert(f"**Launching is off here** ({self.lab.read_only}).", alert_type="warning",
                                       sizing_mode="stretch_width", css_classes=["launch-read-only"]))
        elif self.lab.runner is None:
            notes.append(not_available("Runner (launching runs)", self.lab.runner_reason))
        engine = pn.Row(self.engine_widgets["engine"], self.engine_widgets["partitions"], margin=0)
        form = pn.Column("## Launch a run", *notes, pn.GridBox(*fields, ncols=2), engine, self.errors["engine"],
                         placement,
                         self.errors["placement"], self.errors["form"], self.button, self.status_md, width=560)
        # predictions (footprint plot, step-time projection) load after the form is on screen
        predictions = pn.param.ParamMethod(self.predictions, defer_load=True, sizing_mode="stretch_width")
        return pn.Column(self.fresh_install,
                         pn.Row(form, pn.Column("## Before launching", predictions,
                                                sizing_mode="stretch_width"), sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")
