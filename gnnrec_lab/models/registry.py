"""Every model a run can train, declared once: its name, how to build it, whether it propagates over
the graph, and its cost hooks.

A :class:`ModelSpec` is the one place that knows a model's shape of work. Training builds the
model with :meth:`ModelSpec.build`; :func:`gnnrec_lab.memory.footprint.footprint_phases` reads its
byte hooks (parameters, activations kept for backward, per-edge messages, output width) and
:func:`gnnrec_lab.memory.advise.step_kernels` its kernel hooks (the kernels of each layer, the
deferred L2 gradient); neither branches on a model's name. Every hook is abstract, so a model that
leaves one out cannot be declared.

:func:`register` declares a model: here, and its name with :func:`gnnrec_lab.config.run.declare_model`
(config sits below models and validates ``RunConfig.model``). The built-in models are declared in
both places and ``tests/test_models_registry.py`` checks that the two agree. A new built-in model
touches its module (the ``torch.nn.Module``), this file (its spec) and ``config/run.py``
(:data:`~gnnrec_lab.config.run.MODEL_GRAPHS`); a model registered at run time (a test's) only
calls :func:`register`.

This module loads no torch: :meth:`ModelSpec.build` imports the model's class when called, so the
footprint, the advice and the CLI read the hooks without it.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

from gnnrec_lab.config.checks import Options
from gnnrec_lab.config.run import (
    OPTIONS,
    PRECISION_BYTES,
    Option,
    declare_model,
    declare_option,
    model_option,
    undeclare_model,
    undeclare_option,
)
from gnnrec_lab.util.errors import UserError

F32 = 4   # bytes per float32
# How NGCF computes its neighbour products (NGCFSpec's option ngcf_form): edge-wise, one message per
# edge, or node-wise, aggregating first
NGCF_FORMS = ("edge", "node")


@dataclass(frozen=True)
class Shape:
    """What a run's cost hooks read besides its config: ``n`` nodes (users + items), ``e`` directed
    edges (twice the training interactions), the embedding size ``d`` and ``p``, the bytes of a
    propagated element (``RunConfig.precision``: 4 for fp32, 2 for bf16)."""
    n: int
    e: int
    d: int
    p: int = F32

    @classmethod
    def of(cls, config, n: int, e: int, d: int) -> "Shape":
        """The shape of ``config``'s run on ``n`` nodes and ``e`` edges at width ``d``."""
        return cls(n, e, d, PRECISION_BYTES[getattr(config, "precision", "fp32")])

    @property
    def node(self) -> int:
        """Bytes of one node-sized float32 tensor, ``f N d``."""
        return F32 * self.n * self.d

    @property
    def prop(self) -> int:
        """Bytes of one node-sized propagated tensor (a layer's rows), ``p N d``."""
        return self.p * self.n * self.d

    @property
    def rows(self) -> int:
        """Bytes of the propagated rows an SpMM gathers (one per edge), ``p E d``."""
        return self.p * self.e * self.d

    def narrow(self, phase: str, layer: int) -> dict:
        """The bf16 rounding of one node-sized float32 tensor (4 bytes read, 2 written per element)."""
        return kernel_work("narrow", phase, layer, self.node, self.n * self.d * 2, 0, "stream")

    @property
    def graph_stream(self) -> int:
        """Bytes of the adjacency a sparse kernel streams: indptr, indices, ``D^-1/2``."""
        return 8 * (self.n + 1) + 4 * self.e + F32 * self.n


def kernel_work(name, phase, layer, rd, wr, flops, pattern, row_bytes=0, rnd=0) -> dict:
    """One kernel's work (KernelRecord fields but ``ns``, ``backend`` and ``provenance``)."""
    return dict(name=name, phase=phase, layer=layer, step=0, bytes_read=int(rd), bytes_written=int(wr),
                flops=int(flops), pattern=pattern, row_bytes=int(row_bytes), random_bytes=int(rnd))


class ModelSpec(abc.ABC):
    """A model, declared once. Subclasses set :attr:`name`, :attr:`graph` and :attr:`layer_mean`
    and implement every hook; ``config`` is a :class:`~gnnrec_lab.config.run.RunConfig` (or an
    object with its fields), ``s`` a :class:`Shape`. Byte hooks return bytes, the parameter hook
    elements."""

    name: str = ""
    # propagates over the graph: has layers, samples fan-outs in sampled mode, multiplies the
    # adjacency side by side when the table is large (gnnrec_lab.kernels.native.spmm_sides)
    graph: bool = True
    # propagates with gnnrec_lab.kernels.layer_mean (the mean fused into each SpMM), which runs
    # in a cached locality order when the table is large
    layer_mean: bool = False
    # options only this model reads, name -> record (config.run.model_option): registering the model
    # declares them (config.run.declare_option), so every run takes them, the CLI offers them as flags,
    # the Launch form shows them with this model, advise offers them; other models keep their defaults
    options: dict = {}
    # fields besides the common shape (dataset, depth, width, batch...) that change this model's work:
    # two stored runs measure the same step only when these are equal too (services.projection)
    shape_keys: tuple = ()

    @abc.abstractmethod
    def build(self, config, n_users: int, n_items: int):
        """The ``torch.nn.Module`` for ``config``: ``propagate(adj)``, ``propagate_blocks(blocks, x)``
        and ``layer0`` (gnnrec_lab.models)."""

    # -- bytes: gnnrec_lab.memory.footprint -----------------------------------------------------
    @abc.abstractmethod
    def parameters(self, config, s: Shape) -> int:
        """Elements of every trainable parameter (gradients and optimizer state follow them)."""

    @abc.abstractmethod
    def output_width(self, config) -> int:
        """Width ``d_out`` of the representations the loss scores."""

    @abc.abstractmethod
    def edge_messages(self, config) -> bool:
        """Whether a layer makes a per-edge message (SDDMM then an edge SpMM): one ``f E d``
        tensor at a time, and the transposed structure SDDMM's backward caches."""

    @abc.abstractmethod
    def activation_bytes(self, config, s: Shape, local: bool) -> tuple[int, int]:
        """``(train, eval)``: the node-sized tensors alive at the peak of forward+backward, and
        those of the no-grad propagation; ``local``: propagating in a locality order."""

    @abc.abstractmethod
    def heap_step_bytes(self, config, s: Shape, act_train: int) -> int:
        """What glibc's heap keeps after a step once the node tensors are under its mmap threshold."""

    # -- kernels: gnnrec_lab.memory.advise ------------------------------------------------------
    @abc.abstractmethod
    def layer_kernels(self, config, phase: str, layer: int, s: Shape) -> list:
        """:func:`kernel_work` of layer ``layer`` in ``phase`` (forward or backward)."""

    @abc.abstractmethod
    def deferred_l2(self, config) -> bool:
        """Whether the L2 gradient is added in the propagation's backward (a value-only L2 term in
        the loss, its gradient a record of its own)."""


class LightGCNSpec(ModelSpec):
    """LightGCN: linear propagation, the layer mean fused into each SpMM (kernels.layer_mean)."""

    name = "lightgcn"
    layer_mean = True

    def build(self, config, n_users, n_items):
        from gnnrec_lab.models.lightgcn import LightGCN  # torch: loaded by training, not by the hooks
        return LightGCN(n_users, n_items, dim=config.dim, layers=config.layers,
                        precision=getattr(config, "precision", "fp32"))

    def parameters(self, config, s):
        return s.n * s.d

    def output_width(self, config):
        return config.dim

    def edge_messages(self, config):
        return False

    def activation_bytes(self, config, s, local):
        # kernels.layer_mean saves nothing for backward (the propagation is linear): forward holds
        # the current and next layer and the running mean; backward the incoming gradient, the
        # current and next Horner term and the mean's output still referenced by the graph
        # no_grad: current layer, next layer, running sum (a locality order: one node tensor more
        # at a time, the permuted input or the permuted mean before it is mapped back). bf16: the
        # layers and Horner terms are bf16 (s.prop), the mean, the gradient and the last Horner term
        # (the float32 gradient of the embeddings) stay float32
        extra = s.node if local else 0
        if s.p == F32:
            return 4 * s.node + extra, 3 * s.node + extra
        return 3 * s.node + s.prop + extra, s.node + 2 * s.prop + extra

    def heap_step_bytes(self, config, s, act_train):
        # fitted for LightGCN as (2L + 4) node tensors on ml-100k, synth-gowalla and synth-ml10m (fp32);
        # bf16 (not fitted): the 2L per-layer tensors counted at the propagated rows' size
        return 2 * config.layers * s.prop + 4 * s.node

    def layer_kernels(self, config, phase, layer, s):
        # kernels.layer_mean: the mean's update fused into each SpMM (its float32 rows: s.node); bf16:
        # bf16 rows gathered and written (the backward's last term float32), the input narrowed once
        extra_rd, extra_wr = s.node, (s.node if phase == "forward" else 0)
        written = s.node if (phase == "backward" and layer == 0) else s.prop
        out = [kernel_work("spmm", phase, layer, s.graph_stream + s.rows + extra_rd, written + extra_wr,
                           2 * s.e * s.d, "gather", s.p * s.d, s.rows)]
        first = 0 if phase == "forward" else config.layers - 1
        return ([s.narrow(phase, layer)] if s.p != F32 and layer == first else []) + out

    def deferred_l2(self, config):
        # after LightGCN's layer mean the L2 gradient is added in the mean's backward
        return config.layers > 0


class NGCFSpec(ModelSpec):
    """NGCF, edge-wise (per-edge messages) or node-wise (``ngcf_form``)."""

    name = "ngcf"
    options = {"ngcf_form": model_option(
        "edge", Options(NGCF_FORMS), label="NGCF form",
        help="how NGCF computes its neighbour products, one of {choices}: edge keeps one message per edge "
             "(memory grows with the edges), node aggregates first (same result, no per-edge tensor); NGCF only")}
    shape_keys = ("ngcf_form",)

    def build(self, config, n_users, n_items):
        from gnnrec_lab.models.ngcf import NGCF  # torch: loaded by training, not by the hooks
        return NGCF(n_users, n_items, dim=config.dim, layers=config.layers, form=config.ngcf_form,
                    precision=getattr(config, "precision", "fp32"))

    def parameters(self, config, s):
        d = s.d
        return s.n * d + config.layers * (2 * d * d + 2 * d)    # + W1, W2, b1, b2 per layer

    def output_width(self, config):
        return (config.layers + 1) * config.dim                  # every layer's output concatenated

    def edge_messages(self, config):
        return config.ngcf_form == "edge"

    def activation_bytes(self, config, s, local):
        d, L, d_out = s.d, config.layers, self.output_width(config)
        return (F32 * s.n * (7 * L * d + 3 * d_out),    # 7 node tensors per layer kept + concat + 2 temps
                F32 * s.n * (6 * d + 2 * d_out))        # one layer's temporaries + kept outputs + concat

    def heap_step_bytes(self, config, s, act_train):
        return act_train

    def layer_kernels(self, config, phase, layer, s):
        node, rows, gs, e, d, n = s.node, s.rows, s.graph_stream, s.e, s.d, s.n
        # bf16: each layer's input narrowed for its SpMM, which gathers bf16 rows and writes float32
        out = [s.narrow(phase, layer)] if s.p != F32 else []
        out.append(kernel_work("spmm", phase, layer, gs + rows, node, 2 * e * d, "gather", s.p * d, rows))
        if self.edge_messages(config):
            out.append(kernel_work("sddmm_mul", phase, layer, gs + node + rows, rows, e * d, "gather", F32 * d, rows))
            out.append(kernel_work("spmm_edge", phase, layer, gs + rows, node, 2 * e * d, "stream"))
        mult = 2 if phase == "backward" else 1
        out.append(kernel_work("gemm", phase, layer, 2 * (node + F32 * d * d), 2 * node * mult,
                               2 * 2 * n * d * d * mult, "compute"))
        out.append(kernel_work("elementwise", phase, layer, 12 * node, 6 * node, 8 * n * d, "stream"))
        return out

    def deferred_l2(self, config):
        return False


class MFSpec(LightGCNSpec):
    """Matrix factorisation: LightGCN with no layers, the embeddings scored directly (its
    parameters, output width and lack of edge messages are LightGCN's)."""

    name = "mf"
    graph = False
    layer_mean = False

    def build(self, config, n_users, n_items):
        from gnnrec_lab.models.lightgcn import MF  # torch: loaded by training, not by the hooks
        return MF(n_users, n_items, dim=config.dim)

    def activation_bytes(self, config, s, local):
        return 2 * s.node, s.node

    def heap_step_bytes(self, config, s, act_train):
        return act_train

    def layer_kernels(self, config, phase, layer, s):
        return []    # no layers (config.run.MF_LAYERS): nothing propagates

    def deferred_l2(self, config):
        return False


# name -> spec, in the order every list of models shows (RunConfig's MODELS)
MODEL_SPECS: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Declare ``spec`` (an instance; a class missing a hook cannot be instantiated): here, and its
    name and :attr:`~ModelSpec.graph` with config, so ``RunConfig(model=spec.name)`` validates.
    Returns ``spec``."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register: expected a ModelSpec instance, got {type(spec).__name__}")
    if not isinstance(spec.name, str) or not spec.name.strip():
        raise ValueError(f"register: {type(spec).__name__} has no name")
    for flag in ("graph", "layer_mean"):
        if not isinstance(getattr(spec, flag), bool):
            raise ValueError(f"register: {spec.name}: {flag} must be True or False")
    if not isinstance(spec.options, dict) or not all(isinstance(o, Option) for o in spec.options.values()):
        raise ValueError(f"register: {spec.name}: options must map names to config.run.model_option records, "
                         f"got {spec.options!r}")
    if spec.name in MODEL_SPECS:
        raise ValueError(f"register: model {spec.name!r} is declared already")
    for name, record in spec.options.items():
        declare_option(name, record)
    fields = set(OPTIONS)
    unknown = [k for k in spec.shape_keys if k not in fields]
    if not isinstance(spec.shape_keys, tuple) or unknown:
        for name in spec.options:
            undeclare_option(name)
        raise ValueError(f"register: {spec.name}: shape_keys must be a tuple of RunConfig options, got "
                         f"{spec.shape_keys!r}")
    declare_model(spec.name, spec.graph)
    MODEL_SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove model ``name`` (a test's): here and from config, with its options."""
    spec = MODEL_SPECS.pop(name, None)
    for option in (spec.options if spec is not None else {}):
        if not any(option in s.options for s in MODEL_SPECS.values()):
            undeclare_option(option)
    undeclare_model(name)


def model_spec(name: str) -> ModelSpec:
    """The spec of model ``name`` (UserError naming the declared models for another name)."""
    try:
        return MODEL_SPECS[name]
    except (KeyError, TypeError):
        raise UserError(f"model: unknown {name!r}; declared: {', '.join(MODEL_SPECS)}") from None


def model_options() -> tuple:
    """Every option some declared model reads alone (:attr:`ModelSpec.options`), in declaration order."""
    return tuple(dict.fromkeys(k for s in MODEL_SPECS.values() for k in s.options))


def shape_keys(model=None) -> tuple:
    """:attr:`ModelSpec.shape_keys` of ``model`` (none for a name not declared); without a model,
    those of every declared model."""
    if model is None:
        return tuple(dict.fromkeys(k for s in MODEL_SPECS.values() for k in s.shape_keys))
    spec = MODEL_SPECS.get(model) if isinstance(model, str) else None
    return spec.shape_keys if spec is not None else ()


def graph_models() -> tuple:
    """The declared models that propagate over the graph (sample neighbours), in order."""
    return tuple(m for m, s in MODEL_SPECS.items() if s.graph)


def build_model(config, n_users: int, n_items: int):
    """The model named by ``config.model`` with its depth and embedding size."""
    return model_spec(config.model).build(config, n_users, n_items)


for _spec in (LightGCNSpec(), NGCFSpec(), MFSpec()):
    register(_spec)
