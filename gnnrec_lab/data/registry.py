"""Where interactions come from: names, preparation, the on-disk cache, loading.

Layout under the data directory (``$GNNREC_LAB_DATA``, else the checkout's ``data/``, else
``$GNNREC_LAB_HOME/data``; never the current directory: :func:`data_dir_source`)::

    <name>/meta.json            counts, source, format, how it was made (written last)
    <name>/recipe.json          how to rebuild a user dataset if the cache is damaged
    <name>/interactions.npy     (n, 2) int32 [user, item], sorted, no duplicates
    <name>/train_given.npy      LightGCN directories: the given cut instead
    <name>/valid_given.npy      ... and its validation cut, where it had a valid.txt
    <name>/test.npy
    <name>/user_ids.npy         original id of each contiguous user / item (real data)
    <name>/item_ids.npy
    <name>/splits/seed<S>_<tr>-<va>-<te>/{train,valid,test}.npy + meta.json
    downloads/                  the recbole wheel that carries MovieLens-100K

Preparing is done once per dataset (and once per split seed and fractions);
every directory is built under a temporary name and renamed into place, and a
directory whose meta or arrays do not check out is rebuilt.

Names: ``ml-100k`` (real MovieLens-100K), ``gowalla`` (the LightGCN authors' real Gowalla split,
shipped in ``gnnrec_lab/data/gowalla``: its train/valid/test cut kept as given), the synthetic presets
(:data:`~gnnrec_lab.data.synthetic.PRESETS`), parametric synthetic names
``synth:users=...,items=...,interactions=...[,seed=...]`` and names of datasets a
user prepared from files. For synthetic data the generation seed is part of the
name (default 2020); the ``seed`` of :func:`load` only chooses the split.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from gnnrec_lab.data import readers, storage, synthetic
from gnnrec_lab.data.dataset import Dataset
from gnnrec_lab.data.split import check_split, split_per_user
from gnnrec_lab.graph.bipartite import BipartiteGraph, locality_order
from gnnrec_lab.util.errors import DataError
from gnnrec_lab.util.home import lab_home

ML100K = "ml-100k"
RECBOLE_SPEC = "recbole==1.2.1"
RECBOLE_WHEEL = "recbole-1.2.1-py3-none-any.whl"
# Published counts of MovieLens-100K, used by describe() before it is prepared.
ML100K_COUNTS = {"n_users": 943, "n_items": 1682, "n_interactions": 100_000}
ML100K_SOURCE = f"{RECBOLE_SPEC} wheel: {readers.RECBOLE_ML100K_MEMBER}"
GOWALLA = "gowalla"
GOWALLA_DIR = Path(__file__).resolve().with_name("gowalla")
# Counts of the shipped split (its README), for describe() before it is prepared.
GOWALLA_COUNTS = {"n_users": 29_858, "n_items": 40_981, "n_interactions": 1_027_370}
GOWALLA_TRAIN = 719_081
GOWALLA_SOURCE = "LightGCN authors' Gowalla split (SNAP loc-gowalla), shipped: gnnrec_lab/data/gowalla"
DEFAULT_SPLIT = (0.8, 0.1, 0.1)
DEFAULT_SEED = 2020
# Datasets with more interactions than this are memory-mapped on load instead of read.
MMAP_ABOVE = 5_000_000
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
_RESERVED = {"downloads", "splits"}
# Splits of datasets with at least this many nodes cache a locality order of their training graph
# (at D=64 their tables pass the 96 MiB above which the kernels propagate in it).
ORDER_MIN_NODES = 400_000
ORDER_METHOD = "community"


def builtin_names() -> tuple:
    return (ML100K, GOWALLA) + tuple(synthetic.PRESETS)


def checkout_root() -> Optional[Path]:
    """The source checkout this package is imported from (the directory holding gnnrec-lab's
    ``pyproject.toml`` next to ``gnnrec_lab/``), or None for an installed package."""
    root = Path(__file__).resolve().parents[2]
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if re.search(r'(?m)^name\s*=\s*"gnnrec-lab"', text) else None


def data_dir_source() -> tuple[Path, str]:
    """``(directory, why)`` of the default data directory, not created.

    One rule, whatever the shell's current directory: ``$GNNREC_LAB_DATA`` if set; else the
    checkout's ``data/`` when the package runs from a source checkout (``make lab``, the CLI of
    its ``.venv``, its notebooks: one copy of each dataset); else ``$GNNREC_LAB_HOME/data``
    (``~/.gnnrec_lab/data``) for an installed package."""
    env = os.environ.get("GNNREC_LAB_DATA")
    if env:
        return Path(env).expanduser(), "$GNNREC_LAB_DATA"
    root = checkout_root()
    if root is not None:
        return root / "data", f"the data/ of the checkout at {root}"
    return lab_home() / "data", "$GNNREC_LAB_HOME/data"


def data_dir() -> Path:
    """The data directory (see :func:`data_dir_source`); created if missing."""
    d, why = data_dir_source()
    return _make_dir(d, "GNNREC_LAB_DATA" if why == "$GNNREC_LAB_DATA" else "data_dir")


def _make_dir(d: Path, what: str) -> Path:
    """``d``, created if missing; DataError naming ``what`` when it is not a usable directory."""
    if d.exists() and not d.is_dir():
        raise DataError(f"{what}: {d} is not a directory")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{what}: cannot create the directory {d} ({e.strerror})") from None
    return d


def _root(dd) -> Path:
    if dd is None:
        return data_dir()
    if not str(dd).strip() or "\0" in str(dd):
        raise DataError(f"data_dir: give a directory path, got {str(dd)!r}")
    return _make_dir(Path(dd).expanduser(), "data_dir")


# ----------------------------------------------------------------------
def _resolve(name):
    """``(kind, synth params or None, canonical name)``; kind: ml100k | gowalla | synth | user."""
    if not isinstance(name, str) or not name.strip():
        raise DataError(f"dataset name must be a non-empty string, got {name!r}")
    name = name.strip()
    if name == ML100K:
        return "ml100k", None, name
    if name == GOWALLA:
        return "gowalla", None, name
    if name in synthetic.PRESETS:
        return "synth", synthetic.preset_params(name), name
    if name.startswith("synth:"):
        p = synthetic.parse_synth_name(name)
        p.resolved()   # validate now, with a clear message
        return "synth", p, synthetic.canonical_name(p)
    if name.startswith("synth-") or name == "synth":
        raise DataError(f"unknown synthetic dataset {name!r}; presets: {', '.join(synthetic.PRESETS)}, "
                        f"or synth:users=N,items=M,interactions=K[,seed=S]")
    if not _NAME_RE.match(name) or name in _RESERVED:
        raise DataError(f"unknown dataset {name!r} (not a dataset name; to use a file run "
                        f"`gnnrec-lab data prepare PATH` and load the name it prints)")
    return "user", None, name


def _dir_name(canonical: str) -> str:
    return canonical.replace("synth:", "synth_", 1) if canonical.startswith("synth:") else canonical


def _unknown(name: str, root: Path) -> DataError:
    mine = [m["name"] for m in _prepared_metas(root) if m["name"] not in builtin_names()]
    here = f"; prepared here: {', '.join(mine)}" if mine else ""
    return DataError(f"unknown dataset {name!r}; built-in: {', '.join(builtin_names())}, "
                     f"synth:users=N,items=M,interactions=K{here}; "
                     f"or prepare a file with `gnnrec-lab data prepare PATH`")


def _prepared_metas(root: Path) -> list:
    out = []
    if root.is_dir():
        for d in sorted(root.iterdir()):
            if d.is_dir() and not d.name.startswith(".") and d.name not in _RESERVED:
                m = storage.read_meta(d)
                if m is not None and "name" in m:
                    out.append(m)
    return out


def _split_key(seed: int, fractions) -> str:
    return f"seed{seed}_" + "-".join(f"{f:g}" for f in fractions)


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DataError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


# ----------------------------------------------------------------------
def load(name: str, *, seed: int = DEFAULT_SEED, split=DEFAULT_SPLIT, data_dir=None,
         progress: bool = False, protocol: str = "lab") -> Dataset:
    """The dataset ``name`` split per user with ``seed`` into ``split`` fractions.

    Prepares (downloads, parses or generates) and caches on first use; later calls
    only open the cached ``.npy`` files (memory-mapped, read-only, above
    :data:`MMAP_ABOVE` interactions). ``protocol="paper"`` (a dataset with its own
    ``valid.txt``): the training part is train + valid and the validation part is empty
    (:data:`gnnrec_lab.config.run.PROTOCOLS`).
    """
    fractions = check_split(split)
    seed = _check_seed(seed)
    root = _root(data_dir)
    d, meta = _ensure_prepared(name, root, progress)
    sd, smeta = _ensure_split(d, meta, seed, fractions, progress)
    mmap = meta["n_interactions"] > MMAP_ABOVE
    parts = [storage.open_array(sd / f"{p}.npy", mmap) for p in ("train", "valid", "test")]
    user_ids = storage.open_array(d / "user_ids.npy", mmap) if (d / "user_ids.npy").exists() else None
    item_ids = storage.open_array(d / "item_ids.npy", mmap) if (d / "item_ids.npy").exists() else None
    info = {k: meta.get(k) for k in ("source", "format", "kind", "min_rating", "duplicates_merged",
                                     "columns", "given_test", "given_valid")}
    order_file = sd / _order_name()
    node_order = storage.open_array(order_file, mmap=False) if order_file.exists() else None
    info.update(seed=seed, split=list(fractions), split_protocol=smeta["protocol"],
                counts={"users": meta["n_users"], "items": meta["n_items"],
                        "interactions": meta["n_interactions"], **smeta["counts"]},
                generation=meta.get("generation"), cache_dir=str(d), mmap=mmap)
    if node_order is not None:
        info["node_order"] = {"method": ORDER_METHOD, "file": str(order_file)}
    if protocol == "paper":
        if not meta.get("given_valid"):
            raise DataError(no_paper_protocol(name))
        parts = [np.concatenate([np.asarray(parts[0]), np.asarray(parts[1])]), parts[1][:0], parts[2]]
        info.update(protocol="paper", split_protocol="paper: trains on the given train + valid, validates nothing, "
                                                     "tests on the given test")
        info["counts"].update(train=len(parts[0]), valid=0)
        node_order = None   # the order was computed on the train cut's graph
    return Dataset(meta["name"], int(meta["n_users"]), int(meta["n_items"]), parts[0], parts[1], parts[2],
                   user_ids, item_ids, info, node_order)


def no_paper_protocol(name: str) -> str:
    """Why dataset ``name`` (no valid.txt of its own) cannot train under the paper protocol."""
    return (f"the paper protocol trains on the dataset's own train + valid cut, and {name!r} has no valid.txt (its "
            f"validation part is carved from train): use protocol 'lab', or a dataset prepared from a LightGCN "
            f"directory with a valid.txt (e.g. gowalla)")


def describe(name: str, data_dir=None) -> dict:
    """Counts of ``name`` without preparing or generating anything.

    Returns ``{"n_users", "n_items", "n_interactions", "n_train", "kind", "source",
    "prepared", "n_train_exact", "given_valid"}``. ``n_train`` is exact when the default split is
    cached, else ``0.8 * n_interactions`` (rounded); ``given_valid``: the dataset has its own
    validation cut (a valid.txt), which the paper protocol trains on.
    """
    root = _root(data_dir)
    kind, params, cname = _resolve(name)
    d = root / _dir_name(cname)
    meta = storage.read_meta(d) if (d / "meta.json").exists() else None
    if meta is not None:
        out = {k: meta[k] for k in ("n_users", "n_items", "n_interactions")}
        out.update(kind=meta["kind"], source=meta["source"], prepared=True, given_valid=bool(meta.get("given_valid")))
        sm = storage.read_meta(d / "splits" / _split_key(DEFAULT_SEED, DEFAULT_SPLIT))
        if sm is not None:
            out.update(n_train=sm["counts"]["train"], n_train_exact=True)
        else:
            out.update(n_train=round(DEFAULT_SPLIT[0] * out["n_interactions"]), n_train_exact=False)
        return out
    if kind == "ml100k":
        out = dict(ML100K_COUNTS, kind="real", source=ML100K_SOURCE)
    elif kind == "gowalla":   # its cut is given: train is train.txt
        return dict(GOWALLA_COUNTS, kind="real", source=GOWALLA_SOURCE, n_train=GOWALLA_TRAIN, prepared=False,
                    n_train_exact=True, given_valid=True)
    elif kind == "synth":
        p = params.resolved()
        out = {"n_users": p.users, "n_items": p.items, "n_interactions": p.interactions,
               "kind": "synthetic", "source": "synthetic generator (power-law, planted communities)"}
    else:
        raise _unknown(name, root)
    out.update(n_train=round(DEFAULT_SPLIT[0] * out["n_interactions"]), prepared=False, n_train_exact=False)
    return out


def list_datasets(data_dir=None) -> list[dict]:
    """Built-in datasets then everything prepared under the data directory.

    Each entry: ``{"name", "kind", "n_users", "n_items", "n_interactions", "prepared", "source"}``.
    """
    root = _root(data_dir)
    rows = []
    for name in builtin_names():
        d = describe(name, root)
        rows.append({"name": name, **{k: d[k] for k in ("kind", "n_users", "n_items", "n_interactions",
                                                       "prepared", "source")}})
    for m in _prepared_metas(root):
        if m["name"] in builtin_names():
            continue
        rows.append({"name": m["name"], "kind": m["kind"], "n_users": m["n_users"], "n_items": m["n_items"],
                     "n_interactions": m["n_interactions"], "prepared": True, "source": m["source"]})
    return rows


def prepare(source: str, *, format=None, name=None, min_rating=None, columns=None, sep=None, ids=None,
            seed: int = DEFAULT_SEED, data_dir=None, progress: bool = True) -> str:
    """Prepare a built-in dataset or a file/directory once; returns the name to load it by.

    ``source``: a built-in or synthetic name, or a path (u.data, ml-100k.zip, a
    LightGCN directory, CSV/TSV, Parquet). A file is always re-read (it may have
    changed); a built-in is prepared only if its cache is missing or damaged. The
    default split (``seed``, 8:1:1) is made too, so a later :func:`load` is instant.
    ``ids``: ``"token"`` (default; ids are the strings written, ``007`` is not ``7``) or ``"int"``.
    The columns used are in the prepared dataset's ``meta["columns"]``.
    """
    seed = _check_seed(seed)
    root = _root(data_dir)
    if min_rating is not None:
        if isinstance(min_rating, bool) or not isinstance(min_rating, (int, float)):
            raise DataError(f"min_rating must be a number, got {min_rating!r}")
        min_rating = float(min_rating)
    if name is not None:
        _check_user_name(name)
    src = str(source)
    kind = None
    if src in builtin_names() or src.startswith("synth:") or src.startswith("synth-"):
        kind, params, cname = _resolve(src)
    if kind is not None:
        for opt, v in (("format", format if format not in (None, "auto") else None), ("columns", columns),
                       ("sep", sep), ("ids", ids)):
            if v is not None:
                raise DataError(f"{opt} applies to files, not to the built-in dataset {src!r}")
        if min_rating is None:
            if name is not None and name != cname:
                raise DataError(f"name: built-in dataset {cname!r} keeps its name; got {name!r}")
            d, meta = _ensure_prepared(cname, root, progress)
            _ensure_split(d, meta, seed, DEFAULT_SPLIT, progress)
            return cname
        if kind == "synth":
            raise DataError("min_rating: synthetic datasets have no ratings")
        if kind == "gowalla":
            raise DataError("min_rating: gowalla has no ratings (each interaction is a check-in)")
        recipe = {"builtin": ML100K, "min_rating": min_rating}
        target = name or f"{ML100K}-min{min_rating:g}"
    else:
        path = Path(src).expanduser()
        if not path.exists():
            if os.sep in src or "." in Path(src).name:
                raise DataError(f"{src}: no such file or directory")
            raise _unknown(src, root)
        fmt = readers.detect_format(path, format)
        target = name or _default_name(path, fmt, min_rating)
        recipe = {"path": str(path.resolve()), "format": fmt, "min_rating": min_rating,
                  "columns": readers._columns_spec(columns) or None, "sep": sep, "ids": readers.check_ids(ids)}
    if target in builtin_names() and not (target == ML100K and recipe.get("format") == "ml100k"
                                          and min_rating is None):
        raise DataError(f"name: {target!r} is a built-in dataset; choose another --name")
    _check_user_name(target)
    # build the dataset and its default split in a staging directory; only a complete, splittable
    # dataset replaces one already prepared under this name (a bad file loses nothing)
    stage = storage.new_tmp_dir(root, target)
    try:
        d = _build_user(target, recipe, stage, replace=True, source_root=root)
        _ensure_split(d, storage.read_meta(d), seed, DEFAULT_SPLIT, progress, replace=True)
        storage.publish(d, root / target, replace=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target


def _check_user_name(name):
    if isinstance(name, str) and name in _RESERVED:
        raise DataError(f"name: {name!r} is reserved (the data directory keeps its {name}/ there); "
                        f"choose another --name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise DataError(f"name: {name!r} is not a valid dataset name (letters, digits, '.', '_', '+', '-'; "
                        f"starting with a letter or digit)")
    if name.startswith("synth-") or name.startswith("synth:"):
        raise DataError(f"name: {name!r} is reserved for synthetic datasets; choose another --name")


def _default_name(path: Path, fmt: str, min_rating) -> str:
    if fmt == "ml100k":
        base = ML100K
    elif fmt == "lightgcn":
        base = (path if path.is_dir() else path.parent).name
    else:
        base = path.name.split(".")[0] or path.stem
    base = re.sub(r"[^A-Za-z0-9._+-]", "-", base).strip("-.") or "dataset"
    if base.startswith("synth"):
        base = "user-" + base
    if base in builtin_names() and fmt != "ml100k":   # e.g. RecBole's ml-100k.inter
        base = f"{base}-{fmt}"
    return base if min_rating is None else f"{base}-min{min_rating:g}"


# ----------------------------------------------------------------------
def _ensure_prepared(name, root: Path, progress: bool):
    """The complete cache directory of ``name`` and its meta, building it if needed."""
    kind, params, cname = _resolve(name)
    d = root / _dir_name(cname)
    storage.remove_stale(root, d.name)
    if storage.is_complete(d):
        return d, storage.read_meta(d)
    if kind == "ml100k":
        _build_ml100k(root, d)
    elif kind == "gowalla":
        _build_user(GOWALLA, {"builtin": GOWALLA, "min_rating": None}, root, replace=True)
    elif kind == "synth":
        _build_synth(cname, params, d, progress)
    else:
        if not d.is_dir():
            raise _unknown(name, root)
        try:
            recipe = json.loads((d / "recipe.json").read_text())
        except (OSError, ValueError):
            raise DataError(f"dataset {cname!r}: its cache in {d} is damaged and its source unknown; "
                            f"prepare it again: gnnrec-lab data prepare SOURCE --name {cname}") from None
        _build_user(cname, recipe, root, replace=True)
    return d, storage.read_meta(d)


def _write_dataset(tmp: Path, arrays: dict, meta: dict) -> None:
    """Save ``arrays`` (file name -> array) into ``tmp``, then its meta (last: marks it complete)."""
    shapes = {}
    for fname, arr in arrays.items():
        if arr is None:
            continue
        storage.save_array(tmp / fname, arr)
        shapes[fname] = list(arr.shape)
    storage.write_meta(tmp, dict(meta, arrays=shapes, prepared_at=time.strftime("%Y-%m-%dT%H:%M:%S")))


def _ml100k_wheel(root: Path) -> Path:
    """The recbole wheel under ``<data>/downloads``, fetched with pip if missing."""
    dl = root / "downloads"
    wheel = dl / RECBOLE_WHEEL
    if wheel.is_file():
        try:
            with __import__("zipfile").ZipFile(wheel) as z:
                if readers.RECBOLE_ML100K_MEMBER in z.namelist():
                    return wheel
        except Exception:
            pass
        wheel.unlink()   # a damaged download: fetch again
    dl.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           RECBOLE_SPEC, "-d", str(dl)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DataError(f"ml-100k: could not run pip to download {RECBOLE_SPEC} ({e}); put {RECBOLE_WHEEL} "
                        f"in {dl} or run `gnnrec-lab data prepare path/to/ml-100k.zip`") from None
    if r.returncode != 0 or not wheel.is_file():
        last = (r.stderr or r.stdout or "").strip().splitlines()
        raise DataError(f"ml-100k: downloading {RECBOLE_SPEC} failed ({last[-1] if last else 'no output'}); "
                        f"put {RECBOLE_WHEEL} in {dl} or run `gnnrec-lab data prepare path/to/ml-100k.zip`")
    return wheel


def _build_ml100k(root: Path, d: Path) -> None:
    t0 = time.perf_counter()
    wheel = _ml100k_wheel(root)
    inter = readers.read_ml100k(wheel)
    pairs, uids, iids, dup = readers.index_interactions(inter)
    meta = {"name": ML100K, "kind": "real", "source": ML100K_SOURCE, "format": "ml100k", "min_rating": None,
            "n_users": int(uids.size), "n_items": int(iids.size), "n_interactions": int(pairs.shape[0]),
            "duplicates_merged": dup, "given_test": False, "columns": inter.columns, "generation": None,
            "prepare_seconds": time.perf_counter() - t0}
    _publish_dataset(root, d, {"builtin": ML100K, "min_rating": None},
                     {"interactions.npy": pairs, "user_ids.npy": uids, "item_ids.npy": iids}, meta, replace=False)


def _publish_dataset(root: Path, d: Path, recipe: dict, arrays: dict, meta: dict, replace: bool) -> None:
    """Write a dataset directory under a temporary name, then move it to ``d``."""
    tmp = storage.new_tmp_dir(root, d.name)
    try:
        (tmp / "recipe.json").write_text(json.dumps(recipe))
        _write_dataset(tmp, arrays, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    storage.publish(tmp, d, replace=replace)


def _build_synth(cname: str, params, d: Path, progress: bool) -> None:
    p = params.resolved()
    tmp = storage.new_tmp_dir(d.parent, d.name)
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=p.interactions, unit="int", unit_scale=True, desc=f"generating {cname}",
                   disable=not progress, file=sys.stderr, leave=False)
        with storage.NpyWriter(tmp / "interactions.npy") as w, bar:
            stats = synthetic.generate(p, w.append, bar.update)
        meta = {"name": cname, "kind": "synthetic",
                "source": "synthetic generator (power-law activity and popularity, planted communities)",
                "format": "synthetic", "min_rating": None, "n_users": p.users, "n_items": p.items,
                "n_interactions": stats["interactions"], "duplicates_merged": 0, "given_test": False,
                "columns": None, "generation": dict(p.to_dict(), **stats),
                "prepare_seconds": stats["seconds"]}
        storage.write_meta(tmp, dict(meta, arrays={"interactions.npy": [stats["interactions"], 2]},
                                     prepared_at=time.strftime("%Y-%m-%dT%H:%M:%S")))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    storage.publish(tmp, d)


def _build_user(target: str, recipe: dict, root: Path, replace: bool, source_root: Optional[Path] = None) -> Path:
    t0 = time.perf_counter()
    d = root / target
    min_rating = recipe.get("min_rating")
    if recipe.get("builtin") == GOWALLA:
        data = readers.read_lightgcn(GOWALLA_DIR)
        fmt, source, kind = "lightgcn", GOWALLA_SOURCE, "real"
    elif "builtin" in recipe:
        data = readers.read_ml100k(_ml100k_wheel(source_root or root))
        fmt, source, kind = "ml100k", ML100K_SOURCE, "real"
    else:
        path = Path(recipe["path"])
        fmt = recipe["format"]
        if not path.exists():
            raise DataError(f"dataset {target!r}: its source {path} no longer exists; prepare it again")
        data = readers.read_source(path, fmt, recipe.get("columns"), recipe.get("sep"), recipe.get("ids"))
        source, kind = str(path), ("real" if fmt == "ml100k" else "user")
    meta = {"name": target, "kind": kind, "source": source, "format": fmt, "min_rating": min_rating,
            "generation": None}
    if isinstance(data, readers.GivenSplit):
        if min_rating is not None:
            raise DataError(f"min_rating: LightGCN files ({data.source}) have no ratings")
        tr, va, te, uids, iids, dup = readers.index_given(data)
        arrays = {"train_given.npy": tr, "valid_given.npy": va, "test.npy": te, "user_ids.npy": uids,
                  "item_ids.npy": iids}
        meta.update(n_interactions=int(tr.shape[0] + te.shape[0] + (0 if va is None else va.shape[0])),
                    given_test=True, given_valid=va is not None, columns=None)
    else:
        inter = readers.apply_min_rating(data, min_rating)
        pairs, uids, iids, dup = readers.index_interactions(inter)
        arrays = {"interactions.npy": pairs, "user_ids.npy": uids, "item_ids.npy": iids}
        meta.update(n_interactions=int(pairs.shape[0]), given_test=False, columns=data.columns)
    meta.update(n_users=int(uids.size), n_items=int(iids.size), duplicates_merged=dup,
                prepare_seconds=time.perf_counter() - t0)
    _publish_dataset(root, d, recipe, arrays, meta, replace)
    return d


def _order_name() -> str:
    return f"node_order_{ORDER_METHOD}.npy"


def _ensure_order(sd: Path, meta: dict, progress: bool) -> None:
    """Compute and cache (``<split>/node_order_<method>.npy``, written under a temporary name and
    renamed into place) the locality order of the split's training graph, once, for datasets of
    at least :data:`ORDER_MIN_NODES` nodes; a file that is not a permutation of the nodes is
    rebuilt."""
    n = int(meta["n_users"]) + int(meta["n_items"])
    if n < ORDER_MIN_NODES:
        return
    path = sd / _order_name()
    try:
        a = storage.open_array(path, mmap=False)
        if a.shape == (n,) and np.array_equal(np.sort(a), np.arange(n)):
            return
    except (OSError, ValueError, EOFError):
        pass
    t0 = time.perf_counter()
    if progress:
        print(f"ordering {meta['name']} ({n:,} nodes, {ORDER_METHOD} order) ...", file=sys.stderr, flush=True)
    train = storage.open_array(sd / "train.npy", mmap=True)
    adj = BipartiteGraph(train, int(meta["n_users"]), int(meta["n_items"])).adj
    order = locality_order(adj, ORDER_METHOD)
    del adj
    tmp = sd / f".tmp-{os.getpid()}-{_order_name()}"
    storage.save_array(tmp, order)
    os.replace(tmp, path)
    if progress:
        print(f"ordered {meta['name']} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _ensure_split(d: Path, meta: dict, seed: int, fractions, progress: bool, replace: bool = False):
    """The complete split directory for (seed, fractions) and its meta, building it if needed
    (with the training graph's locality order for large datasets, see :func:`_ensure_order`)."""
    sd, smeta = _ensure_split_arrays(d, meta, seed, fractions, progress, replace)
    _ensure_order(sd, meta, progress)
    return sd, smeta


def _ensure_split_arrays(d: Path, meta: dict, seed: int, fractions, progress: bool, replace: bool = False):
    key = _split_key(seed, fractions)
    sd = d / "splits" / key
    if not replace and storage.is_complete(sd):
        return sd, storage.read_meta(sd)
    storage.remove_stale(d / "splits", key)
    tmp = storage.new_tmp_dir(d / "splits", key)
    n_users = int(meta["n_users"])
    try:
        from tqdm.auto import tqdm
        big = meta["n_interactions"] > MMAP_ABOVE
        bar = tqdm(total=meta["n_interactions"], unit="int", unit_scale=True, desc=f"splitting {meta['name']}",
                   disable=not (progress and big), file=sys.stderr, leave=False)
        with storage.NpyWriter(tmp / "train.npy") as wt, storage.NpyWriter(tmp / "valid.npy") as wv, \
                storage.NpyWriter(tmp / "test.npy") as ws, bar:
            if meta.get("given_valid"):   # the files' own train/valid/test cut: seed and fractions unused
                counts = {}
                for part, fname, w in (("train", "train_given.npy", wt), ("valid", "valid_given.npy", wv),
                                       ("test", "test.npy", ws)):
                    a = storage.open_array(d / fname, mmap=True)
                    w.append(np.asarray(a))
                    counts[part] = int(a.shape[0])
                    bar.update(int(a.shape[0]))
                protocol = "given train / valid / test kept (the files' own cut; split seed and fractions unused)"
            elif meta.get("given_test"):
                train_given = storage.open_array(d / "train_given.npy", mmap=True)
                v = fractions[1] / (fractions[0] + fractions[1])
                counts = split_per_user(train_given, n_users, (1 - v, v, 0.0), seed, [wt, wv, None], bar.update)
                test = storage.open_array(d / "test.npy", mmap=True)
                ws.append(np.asarray(test))
                counts["test"] = int(test.shape[0])
                protocol = (f"given test kept; valid carved from each user's given train items "
                            f"(fraction {v:.4g}, at least 1 for users with >= 3), seeded")
            else:
                inter = storage.open_array(d / "interactions.npy", mmap=True)
                counts = split_per_user(inter, n_users, fractions, seed, [wt, wv, ws], bar.update)
                protocol = ("per-user random split, seeded; users with < 3 interactions keep all in train; "
                            "each held-out part gets max(1, round(d * fraction)) per user")
        if counts["test"] == 0 and fractions[2] > 0:
            raise DataError(f"dataset {meta['name']!r}: users with too few interactions to split "
                            f"(no user has 3 or more, so the test part would be empty)")
        storage.write_meta(tmp, {"seed": seed, "split": list(fractions), "counts": counts, "protocol": protocol,
                                 "arrays": {"train.npy": [counts["train"], 2], "valid.npy": [counts["valid"], 2],
                                            "test.npy": [counts["test"], 2]}})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    storage.publish(tmp, sd, replace=replace)
    return sd, storage.read_meta(sd)
