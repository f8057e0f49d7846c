"""Every colour a chart of the lab draws, one meaning each.

A colour names one thing on every page: a training phase, a kernel, a run, a memory mode, a cache
policy, a cache size, an evaluation metric, an engine, a device curve or a tensor class. Each kind
has its own palette here and no colour is in two of them, nor a memory mode's (the mode table in
config.memory_modes is the one source of mode colours, read here only to stay apart from it).
Whether a number is measured or modeled is never a colour: hatching (bars), dashes or markers
(lines and points) say it. :func:`check_palettes` holds the rule; ``tests/test_dashboard_components.py``
runs it, and a browser test reads the colours of every chart on every page.
"""
from __future__ import annotations

import zlib

from gnnrec_lab.config.memory_modes import MEMORY_MODE_TABLE, UNKNOWN_MODE_COLOR

# Colours without a meaning of their own: one neutral bar colour (a bar per device or tensor
# class, its label says which), the training loss line, ceilings and reference lines.
BAR_COLOR = "#4c72b0"
LOSS_COLOR = "#2f2f2f"
NEUTRAL_COLORS = frozenset({BAR_COLOR, LOSS_COLOR, "#000000", "black", "white", "#ffffff", "red", "#333333"})

# Training phases: hues the kernels' families (blues, oranges, greens, purples, olives) leave free, so
# a phase in Breakdown's stacked bars never looks like a kernel in the pie beside it (forward and
# spmm were both blue).
PHASE_COLORS = {"forward": "#b2182b", "backward": "#de77ae", "loss": "#01665e", "optimizer": "#80cdc1",
                "sampling": "#8e0152", "evaluation": "#4d4d4d", "other": "#e0e0e0"}

# Kernels: Category20b and Category20c shades, none a phase's or a mode's. Every kernel the models
# record has its own entry; a name not listed draws from KERNEL_FALLBACK.
KERNEL_COLORS = {"spmm": "#3182bd", "sddmm": "#6baed6", "gather": "#9ecae1", "scatter": "#c6dbef",
                 "bpr_loss": "#31a354", "l2_reg": "#74c476", "adam": "#e6550d", "sparse_adam": "#fd8d3c",
                 "sgd": "#fdae6b", "bpr_sample": "#756bb1", "sample_wait": "#9e9ac8",
                 "sample_subgraph": "#bcbddc", "row_fetch": "#636363", "row_writeback": "#969696",
                 "gemm": "#5254a3", "spmm_edge": "#6b6ecf", "sddmm_mul": "#9c9ede", "sddmm_dot": "#cedb9c",
                 "add": "#637939", "bias_leaky_relu": "#8ca252", "concat": "#8c6d31", "l2_normalize": "#bd9e39",
                 "scatter_add": "#843c39", "permute": "#ad494a", "adamw": "#7b4173",
                 "other": "#bdbdbd"}
KERNEL_FALLBACK = ("#b5cf6b", "#e7cb94", "#d6616b", "#e7969c", "#a55194", "#ce6dbd", "#de9ed6", "#a1d99b",
                   "#c7e9c0", "#fdd0a2", "#dadaeb", "#d9d9d9")

# Runs (overlays of several runs: loss, validation curves): Dark2 and two of Set1, saturated for lines.
RUN_PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
               "#e41a1c", "#377eb8")

# Cache policies (the Cache page): Paired's dark shades. Cache sizes (the look-ahead chart): its light ones.
POLICY_COLORS = {"none": "#b15928", "lru": "#1f78b4", "lfu": "#33a02c", "static": "#6a3d9a",
                 "oracle": "#e31a1c", "belady": "#ff7f00"}
SIZE_PALETTE = ("#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99")
# How a policy's line is drawn besides its colour: lines that can lie on top of each other (the
# oracle at a long look-ahead reaches Belady's ceiling) differ in dash and marker as well.
POLICY_MARKS = {"none": ("solid", "circle"), "lru": ("solid", "square"), "lfu": ("solid", "triangle"),
                "static": ("dotdash", "diamond"), "oracle": ("solid", "circle"), "belady": ("dashed", "x")}

# Evaluation metrics (Live's validation chart): Tableau10's, apart from every table above.
METRIC_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                  "#9c755f", "#bab0ac")

# Engines of the full-graph vs DistDGL comparison (a series modeled on a memory mode takes the mode's).
ENGINE_COLORS = {"full": "#08519c", "full_bf16": "#6495ed", "distdgl": "#a63603"}

# A device profile's modeled curves (Breakdown's device card), by what each line is.
CURVE_COLORS = {"read": "#66c2a5", "write": "#fc8d62", "write, ntstore": "#8da0cb", "sequential read": "#e78ac3",
                "sequential write": "#a6d854", "random 64 B rows": "#386cb0", "random 256 B rows": "#f0027f",
                "local": "#bf5b17", "remote socket": "#7fc97f"}

# Tensor classes (Launch's predicted DRAM use, stacked by class).
TENSOR_CLASS_COLORS = {"graph": "#1b7837", "embeddings": "#762a83", "optimizer": "#fdb863", "gradients": "#4d9221",
                       "activations": "#2166ac", "edge_intermediates": "#e08214", "buffers": "#35978f",
                       "runtime": "#8073ac"}

# Categories none of the tables above names (a comparison series by its name).
CATEGORY_FALLBACK = ("#00429d", "#93003a", "#005f5f", "#5e3c99", "#8c2d04", "#3f007d")


def _stable(name: str, table: dict, fallback: tuple) -> str:
    """``table[name]``, else a colour of ``fallback`` fixed by the name's CRC (the same in every
    process and run)."""
    return table.get(name) or fallback[zlib.crc32(str(name).encode()) % len(fallback)]


def phase_color(phase: str) -> str:
    """The colour of training phase ``phase`` on every page."""
    return _stable(phase, PHASE_COLORS, (PHASE_COLORS["other"],))


def kernel_name(label: str) -> str:
    """The kernel of a chart label: ``"spmm (forward)"`` (a roofline point, a breakdown row) is
    ``"spmm"``; a bare kernel name is itself."""
    label = str(label)
    if label.endswith(")") and " (" in label:
        return label.rsplit(" (", 1)[0]
    return label


def kernel_color(name: str) -> str:
    """The colour of kernel ``name`` on every chart, whatever the phase (``"spmm (backward)"`` is
    spmm's colour). A kernel not in :data:`KERNEL_COLORS` gets one of :data:`KERNEL_FALLBACK`."""
    return _stable(kernel_name(name), KERNEL_COLORS, KERNEL_FALLBACK)


def run_color(run_id) -> str:
    """The colour of run ``run_id`` in every overlay (loss, validation curves)."""
    return RUN_PALETTE[int(run_id) % len(RUN_PALETTE)]


def policy_base(policy: str) -> str:
    """The policy of a cache curve's label: ``"oracle(L=200)"`` is ``"oracle"``, ``"static-degree"``
    is ``"static"``."""
    return str(policy).split("(", 1)[0].split("-", 1)[0].strip()


def policy_order(policies) -> list:
    """The order a chart draws cache policies in: the dashed ceilings (Belady's) last, on top, so a
    curve that reaches them (the oracle at a long look-ahead) shows between their dashes."""
    return sorted(policies, key=lambda p: policy_marks(p)[0] == "dashed")


def policy_color(policy: str) -> str:
    return _stable(policy_base(policy), POLICY_COLORS, CATEGORY_FALLBACK)


def policy_marks(policy: str) -> tuple[str, str]:
    """``(line_dash, marker)`` of a cache policy's curve."""
    return POLICY_MARKS.get(policy_base(policy), ("solid", "circle"))


def size_color(index: int) -> str:
    return SIZE_PALETTE[int(index) % len(SIZE_PALETTE)]


def metric_color(index: int) -> str:
    return METRIC_PALETTE[int(index) % len(METRIC_PALETTE)]


def category_color(name: str) -> str:
    """A colour fixed by a category's name (a comparison series no engine or memory mode colours)."""
    return _stable(name, {}, CATEGORY_FALLBACK)


def curve_color(label: str) -> str:
    """The colour of a device curve (:data:`CURVE_COLORS`)."""
    return _stable(label, CURVE_COLORS, CATEGORY_FALLBACK)


def palettes() -> dict[str, tuple]:
    """Every palette by what its colours name (the memory modes' from their table)."""
    return {"memory mode": tuple(m.color for m in MEMORY_MODE_TABLE.values()) + (UNKNOWN_MODE_COLOR,),
            "phase": tuple(PHASE_COLORS.values()), "kernel": tuple(KERNEL_COLORS.values()) + KERNEL_FALLBACK,
            "run": RUN_PALETTE, "cache policy": tuple(POLICY_COLORS.values()), "cache size": SIZE_PALETTE,
            "metric": METRIC_PALETTE, "engine": tuple(ENGINE_COLORS.values()), "category": CATEGORY_FALLBACK,
            "device curve": tuple(CURVE_COLORS.values()), "tensor class": tuple(TENSOR_CLASS_COLORS.values()),
            "neutral": (BAR_COLOR, LOSS_COLOR)}


def check_palettes() -> list[str]:
    """Colours that mean two things: within one palette (two kernels, two phases) or across two
    (a kernel's colour a phase's or a mode's). Empty when every colour has one meaning."""
    seen: dict[str, str] = {}
    clashes = []
    for kind, colors in palettes().items():
        for c in colors:
            c = c.lower()
            if c in seen:
                clashes.append(f"{c}: {seen[c]} and {kind}")
            seen.setdefault(c, kind)
    return clashes
