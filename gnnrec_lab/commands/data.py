"""``gnnrec-lab data``: list, prepare and describe datasets."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from gnnrec_lab.commands.common import add_field_argument, bounded, field_type
from gnnrec_lab.config.bounds import number


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="list, prepare and describe datasets",
                              description="List, prepare and describe datasets (cached under $GNNREC_LAB_DATA if set, "
                                          "else the data/ of the source checkout gnnrec-lab runs from, "
                                          "else $GNNREC_LAB_HOME/data; `data list` prints which).")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION")

    ls = sub.add_parser("list", help="built-in and prepared datasets")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_field_argument(ls, "data_dir")
    ls.set_defaults(func=cmd_list)

    pr = sub.add_parser("prepare", help="prepare a built-in dataset or a file once; prints the name to use",
                        description="Prepare a built-in dataset (ml-100k, synth-*, synth:users=..,items=..,"
                                    "interactions=..) or a file: u.data, ml-100k.zip, a LightGCN directory "
                                    "(train.txt + test.txt), CSV/TSV, Parquet or a RecBole atomic file (.inter). "
                                    "Ids are tokens (007 and 7 are two users) unless --ids int.")
    pr.add_argument("source", metavar="NAME_OR_PATH",
                    help="a built-in dataset name, or the file or directory to read")
    pr.add_argument("--format", default="auto", choices=("auto", "ml100k", "lightgcn", "csv", "parquet", "recbole"),
                    help="how to read the source; auto tells from the file name and its first bytes "
                         "(default: %(default)s)")
    pr.add_argument("--name", help="name to load it by (default: from the file name)")
    pr.add_argument("--min-rating", type=bounded(number, "--min-rating"),
                    help="keep only interactions rated at least this value, turning "
                         "explicit ratings into implicit feedback (default: keep all)")
    for pos, (flag, role, header) in enumerate((("user", "user", "user_id"), ("item", "item", "item_id"),
                                                ("rating", "rating", "rating"), ("time", "timestamp", "timestamp"))):
        pr.add_argument(f"--{flag}-col", help=f"{role} column, by header name or 0-based position (default: found "
                                              f"by its header name, e.g. {header}; without a header, column {pos}; "
                                              f"RecBole files: its {role.upper()}{'_ID' if pos < 2 else ''}_FIELD)")
    pr.add_argument("--ids", choices=("token", "int"), default="token",
                    help="token: ids are the strings written (007 and 7 are two users); int: ids must be "
                         "integers within int64 (007 is 7) (default: %(default)s; u.data and LightGCN files "
                         "always hold integers)")
    pr.add_argument("--sep", help="field separator (default: detected; 'tab', 'whitespace', ',', '::', ...)")
    pr.add_argument("--seed", type=field_type("seed"), default=2020,
                    help="seed of the default split made now, 0 to 2**32-1 (default 2020)")
    add_field_argument(pr, "data_dir")
    pr.add_argument("--json", action="store_true", help="print JSON instead of text")
    pr.add_argument("--quiet", action="store_true", help="no progress bar")
    pr.set_defaults(func=cmd_prepare)

    inf = sub.add_parser("info", help="counts, source and split of one dataset")
    inf.add_argument("name", help="dataset name, as `gnnrec-lab data list` shows it")
    add_field_argument(inf, "data_dir")
    inf.add_argument("--json", action="store_true", help="print JSON instead of text")
    inf.set_defaults(func=cmd_info)

    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _count_cell(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def cmd_list(args) -> int:
    from gnnrec_lab.data import list_datasets
    from gnnrec_lab.data.registry import data_dir_source

    rows = list_datasets(args.data_dir)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    where, why = (Path(args.data_dir).expanduser(), "--data-dir") if args.data_dir else data_dir_source()
    print(f"data directory: {where} ({why})")
    head = ("name", "kind", "users", "items", "interactions", "prepared")
    table = [head] + [(r["name"], r["kind"], _count_cell(r["n_users"]), _count_cell(r["n_items"]),
                       _count_cell(r["n_interactions"]),
                       "yes" if r["prepared"] else "no") for r in rows]
    widths = [max(len(row[k]) for row in table) for k in range(len(head))]
    for j, row in enumerate(table):
        cells = [c.ljust(w) if k < 2 else c.rjust(w) for k, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))
    return 0


def cmd_prepare(args) -> int:
    from gnnrec_lab.data import load, prepare

    cols = {"user": args.user_col, "item": args.item_col, "rating": args.rating_col, "timestamp": args.time_col}
    cols = {k: v for k, v in cols.items() if v is not None} or None
    name = prepare(args.source, format=None if args.format == "auto" else args.format, name=args.name,
                   min_rating=args.min_rating, columns=cols, sep=args.sep,
                   ids=None if args.ids == "token" else args.ids, seed=args.seed,
                   data_dir=args.data_dir, progress=not args.quiet and sys.stderr.isatty())
    ds = load(name, seed=args.seed, data_dir=args.data_dir)
    out = _summary(ds)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"prepared {name}: {ds.n_users:,} users, {ds.n_items:,} items, "
              f"{out['interactions']:,} interactions (train {ds.train.shape[0]:,} / valid "
              f"{ds.valid.shape[0]:,} / test {ds.test.shape[0]:,}, seed {args.seed})")
        if out["columns"]:
            print(f"columns used: {_columns_used(out['columns'])}")
        print(f"use it as: --dataset {name}")
    return 0


def _columns_used(columns: dict) -> str:
    """``user=customer, item=sku`` (positions as ``column 0``), what the reader took for each role."""
    order = ("user", "item", "rating", "timestamp")
    return ", ".join(f"{role}={columns[role] if isinstance(columns[role], str) else f'column {columns[role]}'}"
                     for role in order if role in columns)


def _summary(ds) -> dict:
    m = ds.meta
    return {"name": ds.name, "kind": m.get("kind"), "source": m.get("source"), "format": m.get("format"),
            "users": ds.n_users, "items": ds.n_items, "interactions": m["counts"]["interactions"],
            "train": int(ds.train.shape[0]), "valid": int(ds.valid.shape[0]), "test": int(ds.test.shape[0]),
            "density": ds.density, "min_rating": m.get("min_rating"), "seed": m.get("seed"),
            "split": m.get("split"), "split_protocol": m.get("split_protocol"),
            "columns": m.get("columns"), "ids": _ids_kind(ds),
            "duplicates_merged": m.get("duplicates_merged"), "generation": m.get("generation"),
            "cache_dir": m.get("cache_dir")}


def _ids_kind(ds):
    """``token`` / ``int`` as the prepared ids are stored; None where they are contiguous (synthetic)."""
    if ds.user_ids is None:
        return None
    return "int" if ds.user_ids.dtype.kind in "iu" else "token"


def cmd_info(args) -> int:
    from gnnrec_lab.data import describe, load

    d = describe(args.name, args.data_dir)
    if not d["prepared"]:
        out = dict(d, name=args.name)
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print(f"{args.name} ({d['kind']}, not prepared yet): {d['n_users']:,} users, {d['n_items']:,} items, "
                  f"{d['n_interactions']:,} interactions")
            print(f"source: {d['source']}")
            print(f"prepare it with: gnnrec-lab data prepare {args.name}")
        return 0
    ds = load(args.name, data_dir=args.data_dir)
    out = _summary(ds)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{ds.name} ({out['kind']}, {out['format']})")
    print(f"source:       {out['source']}")
    print(f"users:        {ds.n_users:,}")
    print(f"items:        {ds.n_items:,}")
    print(f"interactions: {out['interactions']:,} (density {out['density']:.3%})")
    print(f"split:        train {out['train']:,} / valid {out['valid']:,} / test {out['test']:,} "
          f"(seed {out['seed']}; {out['split_protocol']})")
    if out["min_rating"] is not None:
        print(f"min rating:   {out['min_rating']:g}")
    if out["columns"]:
        print(f"columns:      {_columns_used(out['columns'])} (ids: {out['ids']})")
    if out["generation"]:
        g = out["generation"]
        print("generation:   " + ", ".join(f"{k}={g[k]}" for k in ("users", "items", "interactions", "seed",
                                                                   "user_exp", "item_exp", "communities",
                                                                   "locality") if k in g))
    print(f"cache:        {out['cache_dir']}")
    return 0
