"""What is a run? One validated :class:`RunConfig`.

The CLI, the dashboards, the notebooks, the runner and the store all build and
read this one object. Validation happens here, once, at the door: each error
names the field, the value given and what is allowed.
"""
from __future__ import annotations

import dataclasses
import json
import typing
import unicodedata
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from gnnrec_lab.config.bounds import integer, integers, number
from gnnrec_lab.config.checks import Interval, Options, Parsed, Rule, Text, check, check_value
from gnnrec_lab.config.memory_modes import DEFAULT_MEMORY_MODE, MEMORY_MODE_TABLE, memory_mode_of
from gnnrec_lab.config.places import TENSOR_CLASSES, parse_placement
from gnnrec_lab.util.errors import ConfigError, UserError
from gnnrec_lab.util.files import write_atomic

# The models a run trains, name -> whether it propagates over the graph (has layers, samples fan-outs).
# Each is declared once in gnnrec_lab.models.registry (its builder and cost hooks); config sits below
# models, so it keeps the names RunConfig validates against, and models.registry.register adds a
# model's here (declare_model). tests/test_models_registry.py checks that the two agree.
MODEL_GRAPHS: dict[str, bool] = {"lightgcn": True, "ngcf": True, "mf": False}
MODELS = tuple(MODEL_GRAPHS)   # the built-in models, in the order every list shows them
OPTIMIZERS = ("adam", "adamw", "sgd", "lamb")
# per-row state vectors of every optimizer the cache simulator sizes rows for (runs use OPTIMIZERS;
# adagrad, one vector, is simulated only): the CLI's `cache sim`, the Cache page and row_bytes
OPTIMIZER_STATES = {"sgd": 0, "adagrad": 1, "adam": 2, "adamw": 2, "lamb": 2}
LR_RULES = ("none", "linear", "sqrt")
SCHEDULES = ("none", "cosine", "step")
BACKENDS = ("native", "torch", "dgl")
# How propagated rows are stored. fp32: float32 throughout. bf16: the propagation's input and layer
# rows (and the gradients its backward propagates) stored as bfloat16, rounded to nearest even, the
# SpMM's sums in float32, the embedding table (the optimizer's master weights) float32; native
# backend only. PRECISION_BYTES: bytes per stored element of a propagated row.
PRECISIONS = ("fp32", "bf16")
PRECISION_BYTES = {"fp32": 4, "bf16": 2}
MODES = ("full", "sampled")
# lab: train on train, validate (early stopping, best epoch) on valid, report test; paper: a dataset
# with its own valid.txt trains on train + valid with no validation and reports the last model's
# test, as the LightGCN authors did
PROTOCOLS = ("lab", "paper")
# How an epoch's BPR triples are drawn (gnnrec_lab.graph.sampling.bpr_batches): "interactions" visits
# every training interaction once, in a seeded random order (RecBole, NGCF); "users" draws as many
# triples with their user uniformly at random and a uniformly random train item of that user as the
# positive, the LightGCN authors' UniformSample_original (every user weighs the same, as the per-user
# Recall@20 does)
SAMPLERS = ("interactions", "users")
# Embedding-cache replacement policies, the one list every view shows in this order
# (gnnrec_lab.cache.policies implements each; the simulator runs them all). none: no cache, every
# row read from and written back to the slow tier every batch; belady: the offline optimum (it needs
# the whole future), so only the simulator runs it.
SIMULATED_CACHE_POLICIES = ("none", "lru", "lfu", "static", "oracle", "belady")
# what the real cached tier (gnnrec_lab.cache.cached_rows) runs: every policy but the offline one
TIER_CACHE_POLICIES = tuple(p for p in SIMULATED_CACHE_POLICIES if p != "belady")
# A run's cache_policy. none: table in DRAM (no slow tier); stream: slow tier, no cache (the tier's
# "none"); the others: slow tier behind a DRAM cache of cache_size rows.
CACHE_POLICIES = ("none", "stream") + tuple(p for p in TIER_CACHE_POLICIES if p != "none")
# How a cache study's access trace is made (gnnrec_lab.cache.study): "mf" BPR batches of a 0-layer
# model, "sampled" k-hop sub-graph batches.
CACHE_TRACE_KINDS = ("mf", "sampled")
# Training triples per batch of a cache study's trace when none is asked for: `gnnrec-lab cache` and
# the Cache page both start here, so the same dataset's skew reads the same in both.
CACHE_TRACE_BATCH = 1024
# Memory modes a run can be launched in. "dram" is measured here; the others are
# measured where the hardware exists and modeled (labelled so) elsewhere.
# Each is declared once, with its device profile, in gnnrec_lab.config.memory_modes.
MEMORY_MODES = tuple(MEMORY_MODE_TABLE)


# Largest values shared by several options (each option's own largest value is in its Interval; MAXIMA
# collects them): far beyond any run this lab can hold, small enough that a typo (``--dim 10**12``) is
# refused at the door instead of failing deep inside an allocation.
MAX_LAYERS = 64
MAX_EPOCHS = 1_000_000
CACHE_ROWS_MAX = 1 << 40
MAX_SEED = 2**32 - 1     # numpy/numba seed range

# The layers a graph model propagates over. Model mf has none (MF_LAYERS): mf_layers gives it 0 where
# no layers were asked for, and the table's rule _layers_fit_model refuses any other count; the two
# are the one place that knows it.
LAYERS = Interval(integer, lo=1, hi=MAX_LAYERS)
MF_LAYERS = 0


def declare_model(name: str, graph: bool) -> None:
    """Let RunConfig accept model ``name`` (gnnrec_lab.models.registry.register calls it);
    ``graph``: it propagates over the graph. Declaring a model again changes nothing; declaring
    it again as the other kind is refused."""
    if MODEL_GRAPHS.get(name, graph) != graph:
        raise ValueError(f"model {name!r} is declared already with graph={MODEL_GRAPHS[name]}")
    MODEL_GRAPHS[name] = bool(graph)


def undeclare_model(name: str) -> None:
    """Forget a model declared with :func:`declare_model` (a test's); the built-in ones stay."""
    if name not in MODELS:
        MODEL_GRAPHS.pop(name, None)


def _graph_model(model) -> bool:
    """Whether ``model`` propagates over the graph (an unknown name counts as one: its own check
    refuses it)."""
    return MODEL_GRAPHS.get(model, True) if isinstance(model, str) else True


def mf_layers(model, layers, given: bool = False):
    """The layers a run of ``model`` gets: a model that propagates over no graph (mf) has none
    (:data:`MF_LAYERS`) unless ``layers`` was ``given`` explicitly (then the table's rule judges
    it); any other model keeps ``layers``."""
    return MF_LAYERS if not _graph_model(model) and not given else layers


# -- cross-field rules and parsers of RUN_CONSTRAINTS ------------------------------------------------
def _layers_fit_model(c) -> Optional[str]:
    """A model that propagates over no graph (mf) has no layers; every other model has at least one."""
    if not _graph_model(c["model"]) and c["layers"] != MF_LAYERS:
        return f"model {c['model']!r} has no propagation layers; use {MF_LAYERS}, got {c['layers']}"
    if _graph_model(c["model"]):   # 0 layers is mf's alone: say so in the range
        try:
            LAYERS.parse("layers", c["layers"])
        except ConfigError as e:
            return e.reason
    return None


def fanout_per_layer(c) -> Optional[str]:
    """A sampling model samples at every layer (RunConfig in sampled mode, every DistSpec)."""
    if len(c["fanouts"]) != c["layers"]:
        return f"needs one fan-out per layer ({c['layers']}), got {len(c['fanouts'])}"
    return None


def _one_fanout_per_layer(c) -> Optional[str]:
    """A sampled graph model samples at every layer."""
    return fanout_per_layer(c) if c["mode"] == "sampled" and _graph_model(c["model"]) else None


def _cache_needs_sampled(c) -> Optional[str]:
    """The embedding cache sits in front of the sampled mode's slow-tier table."""
    if c["cache_policy"] != "none" and c["mode"] != "sampled":
        return f"an embedding cache needs mode='sampled', got mode={c['mode']!r}"
    return None


def _paper_has_no_validation(c) -> Optional[str]:
    """The paper protocol trains on the validation cut too: nothing is left to validate on."""
    if c["protocol"] == "paper" and c["target_recall"] is not None:
        return ("the paper protocol trains on train + valid and validates nothing, so no target can be "
                "reached: drop target_recall, or use protocol 'lab'")
    return None


def _threads_within_cores(c) -> Optional[str]:
    """A run pinned to ``cores`` cores runs at most one compute thread per core (more would queue
    on the same cores and time the waiting)."""
    if c["cores"] is not None and c["threads"] is not None and c["threads"] > c["cores"]:
        return f"threads ({c['threads']}) must not exceed cores ({c['cores']}): one thread per pinned core at most"
    return None


def _precision_fits(c) -> Optional[str]:
    """bf16 rows are the native kernels' (numba widens them on load); a model without propagation
    has no rows to store in 16 bits."""
    if c["precision"] == "fp32":
        return None
    if c["backend"] != "native":
        return f"precision {c['precision']!r} runs on the native backend only, got backend {c['backend']!r}"
    if not _graph_model(c["model"]):
        return (f"model {c['model']!r} propagates nothing, so precision {c['precision']!r} would change "
                "nothing; use fp32")
    return None


def _ascending_unique(ks: tuple) -> tuple:
    return tuple(sorted(set(ks)))


def _cache_size(param: str, value) -> str:
    """A row count or a share of rows, as its stripped text."""
    cs = str(value).strip()
    try:
        ok = (0 < float(cs[:-1]) <= 100) if cs.endswith("%") else 0 < int(cs) <= CACHE_ROWS_MAX
    except ValueError:
        ok = False
    if not ok or isinstance(value, bool):
        raise ConfigError(param, f"must be a row count from 1 to {CACHE_ROWS_MAX:,} (e.g. 50000) "
                                 f"or a share of rows in (0, 100]% (e.g. 5%), got {value!r}")
    return cs


def _placement(param: str, value) -> dict:
    """The placement mapping, checked (known classes, well-formed places) and copied."""
    parse_placement(value)
    return dict(value)


# A run's name: what `gnnrec-lab runs` lists and Compare shows (RunConfig.name, `runs rename`).
RUN_NAME_MAX = 200


def check_run_name(param: str, value, *, empty: bool = True) -> str:
    """``value`` as a run's name, or ConfigError naming ``param``: text of at most :data:`RUN_NAME_MAX`
    characters with no control characters (a newline, a tab or a terminal escape would break the
    listings a name is printed in) and not blank; ``""`` (no name) only where ``empty``."""
    what = f"a label of 1 to {RUN_NAME_MAX} characters without control characters"
    if not isinstance(value, str):
        raise ConfigError(param, f"must be {what}, got {value!r}")
    if value == "" and empty:
        return value
    if not value.strip():
        raise ConfigError(param, f"must be {what}, got an empty name" if not value
                          else f"must be {what}, got only spaces")
    if len(value) > RUN_NAME_MAX:
        raise ConfigError(param, f"must be {what}, got {len(value)} characters")
    bad = next((ch for ch in value if unicodedata.category(ch) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        raise ConfigError(param, f"must be {what}, got the control character {bad!r} in {value!r}")
    return value


def _run_name(param: str, value) -> str:
    return check_run_name(param, value, empty=True)


# -- one record per option ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One RunConfig option, declared once: the metadata of its dataclass field (:func:`option`).

    ``checks``: what it accepts (gnnrec_lab.config.checks: a value meets one of the alternatives, then
    every Rule holds); ``label``: its name on a form, in words with units; ``help``: what it does and
    what it accepts (a sentence fragment; :func:`field_help` appends the default); ``unset``: what an
    empty value (None, an empty placement) means, shown instead of "None"; ``maximum``: its largest
    value (an integer option's, read off its Interval unless given); ``widget``: how a form shows it
    where its type and checks do not say ("datasets": a choice of the prepared datasets, "profiles": of
    the device profiles; None: a selector for one of a list, else by type); ``default``: the value a
    run without it gets. A model's own option (:func:`model_option`, declared on its
    :class:`~gnnrec_lab.models.registry.ModelSpec`) is the same record, kept in
    ``RunConfig.model_options`` instead of a field of its own.
    RUN_CONSTRAINTS, FIELD_DOCS, MAXIMA and the form's choices are views of these records."""

    checks: tuple
    label: str
    words: str                      # the help's text; "{choices}" in it stands for the choices now
    unset: str = ""
    maximum: Optional[int] = None
    widget: Optional[str] = None
    default: Any = None

    @property
    def help(self) -> str:
        """What it does and accepts, with the choices it allows now where its words name them."""
        return self.words.replace("{choices}", _choices(self.choices or ()))

    def default_text(self, value: Any = dataclasses.MISSING) -> str:
        """How ``value`` (the option's default unless given) reads: an empty one in the option's
        words ("all users"), a tuple comma-separated."""
        if value is dataclasses.MISSING:
            value = self.default
        if value is None or (isinstance(value, (dict, list, tuple, str)) and not value):
            return self.unset or "none"
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        return str(value)

    def described(self, default: Any = dataclasses.MISSING) -> str:
        """What it does, with its default (the option's unless ``default`` is given): its ``--help``
        and its tooltip on a form."""
        return f"{self.help} (default: {self.default_text(default)})"

    @property
    def choices(self) -> Optional[tuple]:
        """The values an option that takes one of a list allows (read now: a model registered later
        counts), else None."""
        return next((c.values for c in self.checks if isinstance(c, Options)), None)


def _integer_maximum(checks) -> Optional[int]:
    """The ``hi`` of the first integer (or integer list) Interval among ``checks``."""
    return next((c.bounds["hi"] for c in checks if isinstance(c, Interval) and c.check in (integer, integers)
                 and "hi" in c.bounds), None)


def option(default, *checks, label: str, help: str, unset: str = "", maximum: Optional[int] = None,
           widget: Optional[str] = None, factory=None):
    """A RunConfig field declared with everything the lab knows of it (:class:`Option`): ``default``
    (``factory`` makes it when the default is mutable), then its checks and words."""
    o = Option(tuple(checks), label, help, unset, maximum if maximum is not None else _integer_maximum(checks),
               widget, factory() if factory is not None else default)
    if factory is not None:
        return field(default_factory=factory, metadata={"option": o})
    return field(default=default, metadata={"option": o})


def _choices(values) -> str:
    return ", ".join(values)


def model_option(default, *checks, label: str, help: str, unset: str = "") -> Option:
    """A model's own option (one only that model reads, e.g. NGCF's form), for its
    :attr:`ModelSpec.options <gnnrec_lab.models.registry.ModelSpec.options>`: a text, integer or
    number with its checks and words, as :func:`option` declares a RunConfig field. Registering the
    model declares it here (:func:`declare_option`): it is then a ``--flag`` of every command that
    takes RunConfig's, a field of the Launch form, of run files and of the stored config."""
    return Option(tuple(checks), label, help, unset, _integer_maximum(checks), None, default)


# The options models declared (name -> record), in the order they were declared: RunConfig keeps
# their values in its ``model_options`` and reads and writes them as if they were fields.
MODEL_OPTIONS: dict[str, Option] = {}


# What a RunConfig accepts, field -> constraints: a view of the options, filled below RunConfig.
# RunConfig checks with it when built, the CLI's --field flags parse with the same entries
# (commands/common.py), and tests/test_checks.py breaks each one once.
RUN_CONSTRAINTS: dict[str, list] = {}


@dataclass(frozen=True, init=False)
class RunConfig:
    """One training run, checked against :data:`RUN_CONSTRAINTS` when built and frozen after: a
    changed run is ``config.replace(field=value)``, checked again. All sizes in elements unless a
    name says bytes.

    Built from keywords: every field below, and every model's own option (:data:`MODEL_OPTIONS`,
    e.g. ``ngcf_form``), which reads as an attribute (``config.ngcf_form``) and is stored flat with
    the fields (:meth:`to_dict`) although it lives in ``model_options``."""

    dataset: str = option("ml-100k", Text("a dataset name"),
        widget="datasets", label="Dataset",
        help="interactions to train on: a built-in or prepared dataset name (see `gnnrec-lab "
             "data list`) or a generated one, synth:users=N,items=N,interactions=N")
    model: str = option("lightgcn", Options(MODEL_GRAPHS),
        label="Model",
        help="recommender to train, one of {choices} (mf: matrix factorisation, "
             "embeddings without graph layers)")
    layers: int = option(3,
        LAYERS,
        Interval(integer, lo=MF_LAYERS, hi=MF_LAYERS),
        Rule(_layers_fit_model, dict(model="mf", layers=2)),
        label="Propagation layers",
        help="graph convolution layers, i.e. how many hops each embedding mixes "
             "over, from 1 to 64 (model mf has none and is given 0)")
    dim: int = option(64, Interval(integer, lo=1, hi=65_536),
        label="Embedding dimension",
        help="length of each user and item embedding vector (float32 values per row)")
    batch_size: int = option(2048, Interval(integer, lo=1, hi=1 << 27),
        label="Batch size (interactions per step)",
        help="training triples (user, positive item, sampled negative item) per optimizer step")
    # the reference protocol's cap (RecBole 1.2.1 runs, docs/accuracy.md)
    epochs: int = option(200, Interval(integer, lo=1, hi=MAX_EPOCHS),
        label="Maximum epochs",
        help="passes over the training interactions before the run stops; early "
             "stopping (patience) may end it sooner")
    lr: float = option(1e-3, Interval(number, lo=0, lo_open=True),
        label="Learning rate",
        help="the optimizer's base step size, before the batch-size rule, warm-up and "
             "schedule apply")
    l2: float = option(1e-4, Interval(number, lo=0),
        label="L2 regularisation weight",
        help="weight of the L2 penalty on the batch's input (layer-0) embeddings "
             "in the BPR loss; 0 turns it off")
    optimizer: str = option("adam", Options(OPTIMIZERS),
        label="Optimizer",
        help="parameter update rule, one of {choices}")
    # SGD only
    momentum: float = option(0.9, Interval(number, lo=0, hi=1),
        label="SGD momentum",
        help="share of the previous update SGD carries into the next, from 0 "
             "to 1; used by optimizer sgd only")
    # AdamW / LAMB decoupled decay
    weight_decay: float = option(0.0, Interval(number, lo=0),
        label="Decoupled weight decay",
        help="weight decay applied apart from the gradient by adamw "
             "and lamb (the others ignore it); 0 turns it off")
    # scale lr with batch size relative to ref_batch_size
    lr_rule: str = option("none", Options(LR_RULES),
        label="Learning-rate scaling rule",
        help="how the learning rate follows the batch size relative to "
             "the reference batch size, one of {choices}: "
             "linear multiplies it by batch / reference, sqrt by the "
             "square root of that")
    ref_batch_size: int = option(2048, Interval(integer, lo=1, hi=1 << 27),
        label="Reference batch size (interactions per step)",
        help="batch size at which the learning rate is used as given by the scaling rule")
    warmup_steps: int = option(0, Interval(integer, lo=0, hi=1 << 40),
        label="Warm-up (optimizer steps)",
        help="steps over which the learning rate rises linearly to its "
             "full value; the longer of this and warm-up epochs applies")
    warmup_epochs: float = option(0.0, Interval(number, lo=0, hi=float(MAX_EPOCHS)),
        label="Warm-up (epochs)",
        help="warm-up length in epochs, fractions allowed (0.5 = half an "
             "epoch); the longer of this and warm-up steps applies")
    # after warm-up
    schedule: str = option("none", Options(SCHEDULES),
        label="Learning-rate schedule",
        help="decay after warm-up, one of {choices}: cosine "
             "falls to 0 at the last step, step divides by 10 at 50% and "
             "at 75% of the steps")
    seed: int = option(2020, Interval(integer, lo=0, hi=MAX_SEED),
        label="Random seed",
        help=f"seed of initialisation, negative sampling, batch order and the evaluated "
             f"users, an integer from 0 to {MAX_SEED}")
    backend: str = option("native", Options(BACKENDS),
        label="Kernel backend",
        help="implementation of the sparse kernels (SpMM, SDDMM), one of "
             "{choices}: native is this project's numba kernels, torch "
             "uses torch.sparse, dgl uses DGL's (needs DGL installed)")
    # propagated rows: float32, or bfloat16 with float32 sums (PRECISIONS)
    precision: str = option("fp32", Options(PRECISIONS), Rule(_precision_fits, dict(precision="bf16", backend="torch")),
        label="Propagation precision",
        help="how propagated rows are stored, one of {choices}: "
             "bf16 stores the propagation's input, its layers and the "
             "gradients it propagates in 16 bits (half the bytes each SpMM "
             "reads), sums in float32, the embeddings and the optimizer in "
             "float32; native backend and graph models only")
    mode: str = option("full", Options(MODES),
        label="Training mode",
        help="one of {choices}: full propagates over the whole graph every "
             "step, sampled over a sub-graph sampled around each batch with the fan-outs")
    # sampled mode only
    fanouts: tuple = option((10, 10, 10),
        Interval(integers, lo=1, hi=1_000_000, max_len=MAX_LAYERS),
        Rule(_one_fanout_per_layer, dict(mode="sampled", layers=2, fanouts=(10,))),
        label="Fan-outs per layer (neighbours)",
        help="neighbours sampled per node at each layer, first hop "
             "first, comma-separated, one per layer; sampled mode only")
    topk: tuple = option((10, 20), Interval(integers, _ascending_unique, lo=1, hi=100_000, max_len=MAX_LAYERS),
        label="Top-K cut-offs",
        help="list lengths K at which Recall, MRR, NDCG, Hit and Precision@K are reported, "
             "comma-separated")
    # epochs
    eval_every: int = option(1, Interval(integer, lo=1, hi=1_000_000),
        label="Evaluate every (epochs)",
        help="epochs between validation evaluations; the last epoch is "
             "always evaluated")
    # epochs without a new best valid Recall@20 before stopping; 0 = never (outlasts LightGCN's epoch
    # 23-45 plateau on ML-100K: train.EarlyStopping)
    patience: int = option(30, Interval(integer, lo=0, hi=1_000_000),
        label="Early-stopping patience (epochs)",
        help="epochs without a new best validation Recall@20 "
             "before the run stops; 0 never stops early")
    # time-to-accuracy target on validation Recall@20
    target_recall: Optional[float] = option(None, None, Interval(number, lo=0, hi=1, lo_open=True),
        label="Target validation Recall@20",
        help="value in (0, 1] whose first crossing is recorded as "
             "the time to accuracy (the run goes on)",
        unset="no target")
    # what trains and what validates (PROTOCOLS)
    protocol: str = option("lab",
        Options(PROTOCOLS),
        Rule(_paper_has_no_validation, dict(protocol="paper", target_recall=0.1)),
        label="Evaluation protocol",
        help="one of {choices}: lab trains on train, picks the "
             "best epoch and stops early on valid, reports test; paper (a "
             "dataset with its own valid.txt, e.g. gowalla) trains on train + "
             "valid, validates nothing and reports the last model's test, as "
             "the LightGCN authors did")
    # how an epoch's BPR triples are drawn (SAMPLERS)
    sampler: str = option("interactions", Options(SAMPLERS),
        label="BPR sampler",
        help="one of {choices}: interactions visits every training "
             "interaction once per epoch in a random order; users draws as many "
             "triples, each user uniformly at random with one of its train items, "
             "as the LightGCN authors' code does")
    # evaluate a seeded sample of users (None = all)
    eval_users: Optional[int] = option(None, None, Interval(integer, lo=1, hi=1 << 31),
        label="Evaluated users",
        help="number of users evaluated, a seeded random sample (quicker, "
             "noisier metrics)",
        unset="all users")
    # cap for quick runs and tests
    max_steps_per_epoch: Optional[int] = option(None, None, Interval(integer, lo=1, hi=1 << 40),
        label="Step cap per epoch (optimizer steps)",
        help="most steps an epoch takes, for quick "
             "runs and tests",
        unset="no cap")
    # sampled mode: DRAM cache in front of a slow-tier embedding table
    cache_policy: str = option("none",
        Options(CACHE_POLICIES),
        Rule(_cache_needs_sampled, dict(cache_policy="lru", mode="full")),
        label="Embedding cache policy",
        help="sampled mode only, one of {choices}: none "
             "keeps the embedding table in DRAM, stream puts it on the "
             "slow tier without a cache, the others put a DRAM cache of "
             "cache-size rows in front of the slow tier")
    # rows ("50000") or share of rows ("5%")
    cache_size: str = option("5%", Parsed(_cache_size, breaks=("0", "0%", "150%", "lots", 1 << 41, True)),
        label="Cache size (rows or % of rows)", maximum=CACHE_ROWS_MAX,
        help="capacity of the DRAM embedding cache: a row count "
             "(50000) or a share of the table's rows (5%)")
    # batches the oracle policy sees ahead
    lookahead: int = option(200, Interval(integer, lo=1, hi=1_000_000),
        label="Oracle look-ahead (batches)",
        help="upcoming batches the oracle cache policy sees when it "
             "chooses what to evict")
    memory_mode: str = option(DEFAULT_MEMORY_MODE.name, Options(MEMORY_MODES),
        label="Memory mode",
        help="memory the run's step time is for, one of {choices}: "
             "dram is measured on this host; for the others the kernels run on "
             "this host's DRAM and the tier model projects their step time onto "
             "the mode's device profile (modeled)")
    # tensor class -> "dram" | "file:DIR" | "numa:POLICY:NODES"
    placement: dict = option({},
        Parsed(_placement, breaks=({"weights": "dram"}, {"embeddings": "ssd"}, "embeddings=dram")),
        label="Placement per tensor class", factory=dict,
        help=f"where tensor classes live, CLASS=PLACE pairs "
             f"comma-separated (e.g. embeddings=file:/mnt/pmem,"
             f"optimizer=numa:membind:1); classes: "
             f"{_choices(TENSOR_CLASSES)}; places: dram, file:DIR, "
             f"numa:POLICY:NODES",
        unset="every class in DRAM")
    # tier-model target for modeled modes
    device_profile: Optional[str] = option(None, None, Text("a device profile name", strip=True),
        widget="profiles", label="Device profile (modeled)",
        help="device the tier model projects a non-DRAM memory mode "
             "onto: a profile name from gnnrec_lab/memory/devices.yaml "
             "or $GNNREC_LAB_DEVICES (e.g. cxl_type3_ddr5_x8)",
        unset="the memory mode's own profile")
    #  pin the training process to this many cores (gnnrec_lab.util.pinning): one "machine"
    threads: Optional[int] = option(None, None, Interval(integer, lo=1, hi=1024),
        label="Compute threads",
        help="threads for torch and the numba kernels",
        unset="all cores, one left to the slow tier's I/O when a cache is used")
    cores: Optional[int] = option(None,
        None,
        Interval(integer, lo=1, hi=4096),
        Rule(_threads_within_cores, dict(cores=1, threads=2)),
        label="Pinned cores",
        help="pin the training process to this many cores of its own, the first ones "
             "it may run on (its affinity mask), and run that many compute threads: "
             "one machine of C cores, as DistDGL's --cores-per-machine C; refused "
             "when the process may run on fewer",
        unset="not pinned")
    data_dir: Optional[str] = option(None,
        None,
        Text("a directory path (or unset for the default)", strip=True, nul=False),
        label="Data directory",
        help="directory where datasets are prepared and loaded from",
        unset="$GNNREC_LAB_DATA, else the checkout's data/, else $GNNREC_LAB_HOME/data")
    # free-form label
    name: Optional[str] = option(None, None, Parsed(_run_name, breaks=(5, "  ", "x" * (RUN_NAME_MAX + 1), "a\nb",
                                                                  "a\x1b[31mb")),
        label="Run name",
        help=f"free-form label stored with the run, up to {RUN_NAME_MAX} characters, no control characters",
        unset="none")

    # the models' own options (MODEL_OPTIONS), name -> value, every declared one present
    model_options: dict = field(default_factory=dict)

    _parameter_constraints: ClassVar[dict] = RUN_CONSTRAINTS

    def __init__(self, **values):
        own = dict(values.pop("model_options", None) or {})
        own.update({k: values.pop(k) for k in list(values) if k in MODEL_OPTIONS})
        for f in _FIELDS:
            if f.name in values:
                v = values.pop(f.name)
            else:
                v = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            object.__setattr__(self, f.name, v)
        if values:
            raise TypeError(f"RunConfig() got an unexpected keyword argument {next(iter(values))!r}")
        unknown = sorted(set(own) - set(MODEL_OPTIONS))
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; allowed: {', '.join(sorted(OPTIONS))}")
        object.__setattr__(self, "model_options", {k: own.get(k, o.default) for k, o in MODEL_OPTIONS.items()})
        self.__post_init__()

    def __getattr__(self, name: str):
        # only for names no field holds: a model's own option reads as an attribute
        own = self.__dict__.get("model_options")
        if own is not None and name in MODEL_OPTIONS:
            return own.get(name, MODEL_OPTIONS[name].default)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __post_init__(self):
        # built once, here: ints and tuples normalised (numpy ints, lists; topk ascending, once each),
        # the cache size stripped, the placement copied; floats are kept as given, and an int given for
        # a float field becomes the float the checks read (2**53 + 1 for lr was kept as an int, whose
        # second check read another number)
        own = dict(self.model_options)
        for name, value in check(self._parameter_constraints, self._values()).items():
            given = getattr(self, name)
            if value is not given and not (isinstance(value, float) and isinstance(given, float)):
                if name in own:
                    own[name] = value
                else:
                    object.__setattr__(self, name, value)
        object.__setattr__(self, "model_options", own)

    def _values(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in _FIELDS}, **self.model_options}

    def validate(self) -> "RunConfig":
        """This config, checked again (it was when built; nothing is changed)."""
        check(self._parameter_constraints, self._values())
        return self

    # ------------------------------------------------------------------
    @property
    def effective_lr(self) -> float:
        """Learning rate after the batch-size scaling rule."""
        ratio = self.batch_size / self.ref_batch_size
        if self.lr_rule == "linear":
            return self.lr * ratio
        if self.lr_rule == "sqrt":
            return self.lr * ratio ** 0.5
        return self.lr

    @property
    def measured(self) -> bool:
        """Whether time in this run is measured on its memory mode (True for DRAM: config.memory_modes)."""
        return memory_mode_of(self).measured

    def to_dict(self) -> dict:
        """Every option by name, the models' own ones among the fields (as a run file and the store
        hold them)."""
        d = dataclasses.asdict(self)
        d.update(d.pop("model_options"))
        d["fanouts"] = list(self.fanouts)
        d["topk"] = list(self.topk)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        if not isinstance(d, dict):
            raise ConfigError("config", f"expected a dict of RunConfig fields, got {type(d).__name__}")
        unknown = sorted(set(d) - set(OPTIONS))
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; allowed: {', '.join(sorted(OPTIONS))}")
        return cls(**d)

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)


def expect_config(config, where: str) -> None:
    """Refuse anything but a RunConfig at a Python entry point (``run``, ``train``, ``Runner.launch``),
    naming what was given and how to build one (not "'dict' object has no attribute 'validate'")."""
    if not isinstance(config, RunConfig):
        hint = " (RunConfig.from_dict(d) builds one from a dict)" if isinstance(config, dict) else ""
        raise UserError(f"{where}: config: expected a gnnrec_lab.RunConfig, got {type(config).__name__}{hint}")


# ----------------------------------------------------------------------
# The views of the options the rest of the lab reads. Each is a dict filled here and again whenever a
# model declares an option of its own (declare_option), so a module that imported one sees it.
_FIELDS = tuple(f for f in dataclasses.fields(RunConfig) if f.name != "model_options")
# Every option a run has, name -> record: RunConfig's fields, a model's own options after "model"
OPTIONS: dict[str, Option] = {}
# How each field reads to a person (label, help, unset): the one source of the words the CLI's --help
# and the dashboard's forms show (tests/test_config.py checks every field has them).
FIELD_DOCS: dict[str, Option] = OPTIONS
# Largest value of each integer option (and of cache_size's rows)
MAXIMA: dict[str, int] = {}
# Every numeric field (the ones read by the bounded checkers of gnnrec_lab.config.bounds) and its constraints;
# the CLI's --field flags parse with them (commands/common.py).
NUMERIC_FIELDS: dict[str, list] = {}


def _fill_views() -> None:
    own = {f.name: f.metadata["option"] for f in _FIELDS}
    at = list(own).index("model") + 1
    items = [*list(own.items())[:at], *MODEL_OPTIONS.items(), *list(own.items())[at:]]
    for view, values in ((OPTIONS, dict(items)),
                         (RUN_CONSTRAINTS, {n: list(o.checks) for n, o in items}),
                         (MAXIMA, {n: o.maximum for n, o in items if o.maximum is not None}),
                         (NUMERIC_FIELDS, {n: list(o.checks) for n, o in items
                                           if any(isinstance(c, Interval) for c in o.checks)})):
        view.clear()
        view.update(values)


def declare_option(name: str, record: Option) -> None:
    """Let every run take model option ``name`` (:func:`model_option`; models.registry.register
    declares a model's): RunConfig accepts and stores it, the CLI's run flags, run files and the
    Launch form offer it. Declaring the same record again changes nothing; a name RunConfig or
    another option holds is refused, as is an option no scalar form can show."""
    if not isinstance(record, Option):
        raise TypeError(f"declare_option: {name}: expected an Option (config.run.model_option), "
                        f"got {type(record).__name__}")
    if any(f.name == name for f in _FIELDS) or name == "model_options" or MODEL_OPTIONS.get(name, record) != record:
        raise ValueError(f"declare_option: {name!r} is an option of every run already")
    if not isinstance(record.default, (str, int, float)) or isinstance(record.default, bool) or None in record.checks:
        raise ValueError(f"declare_option: {name}: a model option is a text or a number that is always set, got "
                         f"default {record.default!r}")
    check({name: list(record.checks)}, {name: record.default})
    MODEL_OPTIONS[name] = record
    _fill_views()


def undeclare_option(name: str) -> None:
    """Forget model option ``name`` (models.registry.unregister, a test's model)."""
    if MODEL_OPTIONS.pop(name, None) is not None:
        _fill_views()


def model_option_values(param: str, value) -> dict:
    """``value``, a run's model options (a mapping, as ``RunConfig.model_options`` and a DistDGL
    spec hold them), with every declared option, each checked as RunConfig checks it; ConfigError
    naming ``param`` (and the option) otherwise."""
    if not isinstance(value, dict):
        raise ConfigError(param, f"must be a mapping of model options ({', '.join(MODEL_OPTIONS) or 'none declared'}), "
                                 f"got {value!r}")
    unknown = sorted(set(value) - set(MODEL_OPTIONS))
    if unknown:
        raise ConfigError(param, f"{unknown[0]!r} is not a model option; declared: "
                                 f"{', '.join(MODEL_OPTIONS) or 'none'}")
    try:
        return {k: check_value(k, list(o.checks), value.get(k, o.default)) for k, o in MODEL_OPTIONS.items()}
    except ConfigError as e:
        raise ConfigError(param, str(e)) from None


def option_type(name: str) -> tuple[type, bool]:
    """Option ``name``'s type (str, int, float, tuple or dict) and whether it may be None."""
    if name in MODEL_OPTIONS:
        return type(MODEL_OPTIONS[name].default), False
    kind = typing.get_type_hints(RunConfig)[name]
    args = typing.get_args(kind)
    optional = type(None) in args
    if optional:
        kind = next(a for a in args if a is not type(None))
    return typing.get_origin(kind) or kind, optional


_fill_views()
# numeric fields whose None means "unset" (see FIELD_DOCS' unset words)
OPTIONAL_FIELDS = tuple(n for n, cs in NUMERIC_FIELDS.items() if None in cs)


def check_field(name: str, value, text: bool = True, param: Optional[str] = None):
    """``value`` for numeric RunConfig field ``name``, checked against its constraints (ConfigError
    naming ``param``, the field by default, otherwise); ``text``: the value may be what a user typed."""
    return check_value(param or name, NUMERIC_FIELDS[name], value, text=text)


def _checker(name: str):
    """The bounds checker (integer, number or integers) that reads numeric field ``name``."""
    return next(c.check for c in NUMERIC_FIELDS[name] if isinstance(c, Interval))


def field_label(name: str) -> str:
    """The words a form shows for RunConfig field ``name`` (e.g. "Embedding dimension" for ``dim``)."""
    return FIELD_DOCS[name].label


def default_text(name: str, value: Any = dataclasses.MISSING) -> str:
    """How a default of field ``name`` reads: ``value``, else RunConfig's default; an empty one in
    the field's words ("all users"), a tuple comma-separated."""
    return OPTIONS[name].default_text(value)


def field_help(name: str, default: Any = dataclasses.MISSING) -> str:
    """What field ``name`` does, with its default (RunConfig's unless ``default`` is given):
    the text of its ``--help`` and of its tooltip on the dashboard."""
    return OPTIONS[name].described(default)


# ----------------------------------------------------------------------
# Run files: RunConfig's fields as YAML (``gnnrec-lab run --config run.yaml``), as RecBole and
# Hydra users keep their runs. The file is only a mapping of field -> value; RunConfig validates it.
# which fields are tuples, read off NUMERIC_FIELDS' checkers (the CLI's flags use them too); a model's
# own option is never one
TUPLE_FIELDS = tuple(n for n in NUMERIC_FIELDS if _checker(n) is integers)   # fanouts, topk


class ConfigFileError(ConfigError):
    """A field of a run file is invalid: names the file, the field's line and the field."""

    def __init__(self, path, line: Optional[int], param: str, message: str):
        self.param = param
        where = f"{path}:{line}" if line else str(path)
        UserError.__init__(self, f"{where}: {param}: {message}")


def _coerce(name: str, value):
    """A YAML value as RunConfig takes it: lists as tuples where the field is a tuple, and the
    exponent floats YAML 1.1 reads as strings (``1e-3``) as floats; anything else is left for
    RunConfig to judge."""
    if name in TUPLE_FIELDS:
        if isinstance(value, list):
            return tuple(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
    if name in NUMERIC_FIELDS and _checker(name) is number and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def read_config_file(path, multi: bool = False) -> tuple[dict, dict]:
    """``(fields, lines)`` of YAML run file ``path``: field -> value (``multi``: field -> list of
    values, a list value being the values a sweep takes) and field -> its 1-based line.
    Unknown fields, duplicate keys and YAML errors name the file and line."""
    import yaml

    p = str(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"--config: {p}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"--config: {p}: is a directory; give a YAML file") from None
    except UnicodeDecodeError:
        raise UserError(f"--config: {p}: not UTF-8 text") from None
    except OSError as e:
        raise UserError(f"--config: {p}: {e.strerror}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise UserError(f"{p}:{mark.line + 1 if mark else '?'}: not valid YAML ({e.problem or e.context})") from None
    except yaml.YAMLError as e:
        raise UserError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise UserError(f"{p}:1: expected a mapping of RunConfig fields (dim: 64, layers: 3, ...), "
                        f"got {type(data).__name__}")
    lines: dict = {}
    for key_node, _ in node.value:
        key = key_node.value
        if key in lines:
            raise UserError(f"{p}:{key_node.start_mark.line + 1}: {key}: given twice "
                            f"(first on line {lines[key]})")
        lines[key] = key_node.start_mark.line + 1
    known = list(OPTIONS)
    for key in data:
        if not isinstance(key, str) or key not in known:
            raise ConfigFileError(p, lines.get(str(key)), str(key),
                                  f"unknown field; allowed: {', '.join(sorted(known))}")
    if not multi:
        return {k: _coerce(k, v) for k, v in data.items()}, lines
    out = {}
    for k, v in data.items():
        # a sweep axis: a list for a scalar field, a list of lists for fanouts/topk, a list of mappings
        # for placement
        if k in TUPLE_FIELDS:
            axis = isinstance(v, list) and bool(v) and all(isinstance(x, list) for x in v)
            out[k] = [_coerce(k, x) for x in v] if axis else _coerce(k, v)
        else:
            out[k] = [_coerce(k, x) for x in v] if isinstance(v, list) else [_coerce(k, v)]
    return out, lines


def file_error(e: ConfigError, path, lines: dict, from_file) -> ConfigError:
    """``e`` with the run file's name and the field's line when the field came from the file."""
    if isinstance(e, ConfigFileError) or path is None:
        return e
    message = str(e)[len(e.param) + 2:] if str(e).startswith(f"{e.param}: ") else str(e)
    if e.param in from_file:
        return ConfigFileError(path, lines.get(e.param), e.param, message)
    return e


def save_config_file(config: RunConfig, path) -> None:
    """Write ``config`` as a YAML run file (every field, RunConfig's order); read back by
    :func:`read_config_file` it gives the same config."""
    import yaml
    d = config.to_dict()
    head = ("# gnnrec-lab run configuration: every RunConfig field (gnnrec-lab run --config FILE;\n"
            "# flags given with --config override the file)\n")
    body = yaml.safe_dump(d, sort_keys=False, default_flow_style=None, allow_unicode=True)
    if yaml.safe_load(body) != d:
        # a character YAML reads back as another when written raw (NEL, U+0085, reads as a line
        # break): write every non-ASCII character escaped instead
        body = yaml.safe_dump(d, sort_keys=False, default_flow_style=None, allow_unicode=False)
    write_atomic(path, head + body)
