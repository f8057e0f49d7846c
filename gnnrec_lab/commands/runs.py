"""``gnnrec-lab runs``: list stored runs; ``runs show|cancel|wait|delete ID``, ``runs rename ID NAME``."""
from __future__ import annotations

import json
import math
import sys
import time

from gnnrec_lab.commands.common import bounded, run_id
from gnnrec_lab.config.bounds import MAX_SECONDS, number
from gnnrec_lab.config.memory_modes import memory_mode_of, mode_look
from gnnrec_lab.config.run import RUN_NAME_MAX
from gnnrec_lab.memory.calibrate import calibration_flags
from gnnrec_lab.memory.tiermodel import LOW, fmt_band, mode_label, modeled_seconds
from gnnrec_lab.runs.record import RunRecord
from gnnrec_lab.runs.runner import Runner, recover_dead
from gnnrec_lab.runs.store import Store, describe_store_error, running_run_error
from gnnrec_lab.services.export import export_mlflow, export_tensorboard
from gnnrec_lab.services.projection import host_calibration, modeled_runs_frame, run_step_times
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_duration, fmt_ms
from gnnrec_lab.util.proc import LOAD_POINTS, load_cell, load_summary, load_warning
from gnnrec_lab.util.provenance import Provenance
from gnnrec_lab.util.status import RunStatus

TABLE = (  # (header, column in services.projection.modeled_runs_frame)
    ("id", "id"), ("name", "name"), ("status", "status"), ("dataset", "dataset"), ("model", "model"),
    ("layers", "layers"), ("dim", "dim"), ("batch", "batch_size"), ("memory mode", "memory_mode"),
    ("device (modeled)", "device"), ("started", "started"),
    # measured beside modeled: a modeled memory mode's kernels still run on this host's DRAM; the
    # step is the wall step, the kernel time its kernels' share (tiermodel.step_times)
    ("step (measured)", "step_s"), ("step (modeled)", "modeled_step_s"),
    ("kernel time (measured)", "kernel_s"), ("kernel time (modeled)", "modeled_kernel_s"),
    ("train (measured)", "train_s"), ("train (modeled)", "modeled_train_s"),
    # how far to trust the modeled columns (tiermodel.model_band): their +- sits in their cells
    ("confidence (modeled)", "confidence"), ("duration", "duration_s"),
    ("best valid R@20", "best_valid_recall@20"),
    ("test R@20", "test_recall@20"), ("load", "load_max"),
)
# The columns `gnnrec-lab runs` lists by default, to fit WIDTH characters (a memory mode by its short
# label); `--wide` lists TABLE.
NARROW = (("id", "id"), ("name", "name"), ("status", "status"), ("dataset", "dataset"), ("model", "model"),
          ("L", "layers"), ("batch", "batch_size"), ("memory mode", "memory_mode"),
          ("step (measured)", "step_s"), ("step (modeled)", "modeled_step_s"), ("test R@20", "test_recall@20"),
          ("load", "load_max"))
# Text columns that give up characters (cut with "…") before a column is left out, and the
# columns left out first when cutting is not enough (the last named goes first).
SHRINKABLE = {"name": 6, "dataset": 10, "status": 8, "model": 6}
DROP_ORDER = ("test R@20", "batch", "L", "model", "load")
WIDTH = 120
# marks a run whose load average exceeded its cores (the table's footnote says what it means)
OVERLOADED_MARK = "!"


def register(subparsers) -> None:
    p = subparsers.add_parser("runs", help="list, inspect, cancel and wait for stored runs",
                              description="List runs in the run store ($GNNREC_LAB_HOME/lab.sqlite). Times "
                                          "are measured on this host: the step is the wall time of a "
                                          "training step, the kernel time its kernels' part of it; for a "
                                          "modeled memory mode the '(modeled)' columns scale them by the "
                                          "run's modeled/measured kernel-time ratio (as `runs show` and "
                                          "`whatif` print it).")
    p.add_argument("--json", action="store_true", help="print the list as JSON (machine-readable)")
    p.add_argument("--status", choices=[s.value for s in RunStatus],
                   help="list only runs with this status (default: every status)")
    p.add_argument("--wide", action="store_true",
                   help=f"list every column (device profile, kernel and training times, confidence, duration, "
                        f"validation); by default the list fits {WIDTH} characters")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    s = sub.add_parser("show", help="everything stored about one run")
    s.add_argument("id", type=run_id, help="run id, as `gnnrec-lab runs` lists it")
    s.add_argument("--json", action="store_true", dest="show_json", help="print one JSON object")
    c = sub.add_parser("cancel", help="ask a run to stop; SIGTERM/SIGKILL after the grace period")
    c.add_argument("id", type=run_id, help="run id, as `gnnrec-lab runs` lists it")
    c.add_argument("--grace", type=bounded(number, "--grace", 0, MAX_SECONDS), default=5.0,
                   help="seconds to wait before each escalation, 0 or more (default 5)")
    w = sub.add_parser("wait", help="block until a run ends; exit 0 only when it finished")
    w.add_argument("id", type=run_id, help="run id, as `gnnrec-lab runs` lists it")
    w.add_argument("--timeout", type=bounded(number, "--timeout", 0, MAX_SECONDS, lo_open=True), default=None,
                   help="give up after this many seconds (default: wait as long as the run takes)")
    _register_rename(sub)
    _register_delete(sub)
    x = sub.add_parser("export", help="copy runs into MLflow or TensorBoard",
                       description="Copy stored runs into MLflow (params, per-epoch loss and validation metrics, "
                                   "test metrics, measured and modeled step times, the kernel table, footprint "
                                   "and Perfetto trace as artifacts, the host as tags) or TensorBoard (scalars and "
                                   "hparams). The run store keeps everything; the export is a copy.")
    x.add_argument("ids", nargs="+", type=run_id, help="run ids, as `gnnrec-lab runs` lists them")
    x.add_argument("--to", nargs="+", required=True, metavar="TARGET",
                   help="'mlflow', or 'tensorboard DIR' (event files under DIR, one directory per run)")
    x.add_argument("--tracking-uri", metavar="URI",
                   help="MLflow tracking URI, e.g. sqlite:///mlflow.db or http://127.0.0.1:5000 "
                        "(default: MLflow's own, $MLFLOW_TRACKING_URI)")
    x.add_argument("--experiment", default="gnnrec-lab",
                   help="MLflow experiment the runs go into, created when missing (default: %(default)s)")
    p.set_defaults(func=main)


def _register_rename(sub) -> None:
    r = sub.add_parser("rename", help="give a run a new name",
                       description="Give a stored run a new name (what `runs` lists and Compare shows): 1 to "
                                   f"{RUN_NAME_MAX} characters, no control characters.")
    r.add_argument("id", type=run_id, help="run id, as `gnnrec-lab runs` lists it")
    r.add_argument("name", help=f"the new name, 1 to {RUN_NAME_MAX} characters (quote it when it has spaces)")


def _register_delete(sub) -> None:
    d = sub.add_parser("delete", help="delete a run: its rows in the store and its logs",
                       description="Delete a stored run: its row, its steps, kernel records, evaluations, "
                                   "events, epochs and footprint, and its log directory "
                                   "($GNNREC_LAB_HOME/runs/ID); no other run is touched. Asks you to type the "
                                   "run id to confirm, unless --yes. A running run is refused: cancel it first.")
    d.add_argument("id", type=run_id, help="run id, as `gnnrec-lab runs` lists it")
    d.add_argument("--yes", action="store_true", help="delete without asking (scripts)")


def _rename(store, args) -> int:
    """``runs rename ID NAME``: a refused name is a ConfigError naming ``name``."""
    old = store.get_run(args.id)["name"]
    name = store.rename_run(args.id, args.name)
    print(f"run {args.id}: renamed {old!r} -> {name!r}" if old else f"run {args.id}: named {name!r}")
    return 0


def _delete(store, args, ask=input) -> int:
    """``runs delete ID [--yes]``: confirmed by typing the id (stdin); no answer, or another one,
    deletes nothing (exit 1)."""
    run = store.get_run(args.id)
    if run["status"] is RunStatus.RUNNING:   # before asking (Store.delete_run refuses it too, in its transaction)
        raise running_run_error(args.id)
    if not args.yes:
        what = f"run {args.id}" + (f" ({run['name']})" if run["name"] else "") + f", {run['status']}"
        try:
            answer = ask(f"delete {what}, its rows and its logs? Type the run id ({args.id}) to confirm: ")
        except EOFError:
            answer = None
        if answer is None or answer.strip() != str(args.id):
            print(f"gnnrec-lab: run {args.id} was not deleted (" + ("no answer on stdin; pass --yes to delete "
                  "without asking" if answer is None else f"{answer.strip()!r} is not {args.id}") + ")",
                  file=sys.stderr)
            return 1
    gone = store.delete_run(args.id)
    rows = sum(v for k, v in gone.items() if k not in ("runs", "files"))
    print(f"run {args.id}: deleted ({rows:,} rows" + (f", {gone['files']}" if gone["files"] else "") + ")")
    return 0


def _export(store, args) -> int:
    target = args.to[0]
    if target == "mlflow":
        if len(args.to) > 1:
            raise UserError(f"--to mlflow takes no directory (got {' '.join(args.to[1:])!r}); "
                            f"use --tracking-uri URI")
        done = export_mlflow(store, args.ids, tracking_uri=args.tracking_uri, experiment=args.experiment)
        for d in done:
            print(f"run {d['run_id']} -> MLflow run {d['mlflow_run_id']}"
                  + ("" if d["new"] else " (exported before; left as it is)"))
        return 0
    if target == "tensorboard":
        if len(args.to) != 2:
            raise UserError("--to tensorboard needs one directory: --to tensorboard DIR")
        if args.tracking_uri:
            raise UserError("--tracking-uri applies to --to mlflow, not tensorboard")
        for d in export_tensorboard(store, args.ids, args.to[1]):
            print(f"run {d['run_id']} -> {d['dir']}")
        print(f"view with: tensorboard --logdir {args.to[1]}")
        return 0
    raise UserError(f"--to: got {target!r}, allowed: mlflow, tensorboard DIR")


def _table_cell(v, col: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if col == "started":
        try:
            if v != v:  # NaT
                return "-"
        except Exception:  # noqa: BLE001
            pass
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.timestamp()))  # local, as `runs show`
    if col in ("duration_s", "train_s", "modeled_train_s"):
        return fmt_duration(float(v))
    if col in ("step_s", "modeled_step_s", "kernel_s", "modeled_kernel_s"):
        return fmt_ms(v)
    if col.endswith("recall@20"):
        return f"{float(v):.4f}"
    if col == "load_max":
        return f"{float(v):.1f}"
    return str(v)


# modeled cells and the band (services.projection.with_modeled's columns) that goes beside each
_BANDS = {"modeled_step_s": "modeled_step_band", "modeled_train_s": "modeled_step_band",
          "modeled_kernel_s": "modeled_kernel_band"}


def _banded(row: dict, col: str) -> str:
    """A cell of the run list, a modeled one with its ``±`` (tiermodel.fmt_band)."""
    cell = _table_cell(row[col], col)
    band = row.get(_BANDS.get(col, ""))
    if cell != "-" and band is not None and band == band:
        cell += " " + fmt_band(float(band))
    if col == "confidence" and row[col] == LOW:
        cell = "LOW"
    return cell


def _load_cell(row: dict) -> str:
    """The list's load column (:func:`~gnnrec_lab.util.proc.load_cell`)."""
    return load_cell(row.get("load_max"), row.get("cpus"), row.get("overloaded"), OVERLOADED_MARK)


# Evaluation outputs that are counts, not metrics (printed as integers).
COUNT_METRICS = ("users", "users_all")


def _metric(name: str, value: float) -> str:
    """A stored evaluation value as `runs show` prints it: counts as integers, metrics to 4 places."""
    if name in COUNT_METRICS and float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4f}"


def _parts(run: dict) -> str:
    """'  (startup 3.1 s, kernel JIT 1m 28s, training 9.5 s, other 2.0 s)' from Store.get_run's parts."""
    names = (("startup_s", "startup"), ("jit_s", "kernel JIT"), ("train_s", "training"), ("other_s", "other"))
    parts = [f"{label} {fmt_duration(run[k])}" for k, label in names if run.get(k) is not None]
    return f"  ({', '.join(parts)})" if parts else ""


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(1, width - 1)] + "…"


def fit_table(rows: list[list[str]], headers: list[str], width: int = WIDTH) -> tuple[list[list[str]], list[str], list]:
    """``rows`` and ``headers`` cut to fit ``width`` characters: the widest :data:`SHRINKABLE` text
    columns lose characters first (down to their floor, the cut marked "…"), then columns of
    :data:`DROP_ORDER` are left out. Returns the rows, the headers and the headers left out."""
    rows, headers, dropped = [list(r) for r in rows], list(headers), []

    def widths():
        return [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def total():
        return sum(widths()) + 2 * (len(headers) - 1)
    while total() > width:
        w = widths()
        cuts = [(w[i] - max(SHRINKABLE[h], len(h)), i) for i, h in enumerate(headers) if h in SHRINKABLE]
        over, i = max(cuts, default=(0, None))
        if i is not None and over > 0:
            target = max(w[i] - (total() - width), max(SHRINKABLE[headers[i]], len(headers[i])))
            for r in rows:
                r[i] = _cut(r[i], target)
            continue
        left = [h for h in DROP_ORDER if h in headers]
        if not left:
            break
        i = headers.index(left[0])
        dropped.append(headers.pop(i))
        for r in rows:
            r.pop(i)
    return rows, headers, dropped


def _list(store, args) -> int:
    df = modeled_runs_frame(store, status=args.status)
    if args.json:
        out = []
        for rec in df.to_dict(orient="records"):
            for k in ("created", "started", "finished"):
                v = rec[k]
                rec[k] = None if v is None or v != v else v.isoformat()
            out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()})
        print(json.dumps(out, default=str, indent=1))
        return 0
    if df.empty:
        print(f"no runs{' with status ' + args.status if args.status else ''} in {store.path}")
        return 0
    recs = df.to_dict(orient="records")
    wide = getattr(args, "wide", False)
    columns = TABLE if wide else NARROW
    rows = [[_list_cell(r, col, wide) for _, col in columns] for r in recs]
    headers = [h for h, _ in columns]
    say = print if wide else _wrapped
    if not wide:
        rows, headers, dropped = fit_table(rows, headers)
        if dropped:
            say(f"(left out to fit {WIDTH} characters: {', '.join(dropped)})")
    print(_table(rows, headers))
    if any(r.get("confidence") is not None for r in recs):
        say("± on a modeled cell: the held-out error of the regimes its modeled traffic falls in "
            "(`runs show ID` says which) and, in quadrature, the run's step-to-step spread (measured); "
            "low confidence: most of it in a regime that failed validation, "
            "or a flagged host calibration")
    if any(r.get("overloaded") for r in recs):
        say(f"{OVERLOADED_MARK} load average (1 min) above the core count during the run: its measured times "
            f"include waiting for other work")
    if not wide:
        say("--wide lists every column: the device profile, kernel and training times, confidence, duration and "
            "validation Recall@20.")
    for r in recs:   # a damaged row is listed above with what is readable, and named here
        if isinstance(r.get("damaged"), str):
            say(f"run {r['id']} is damaged: {r['damaged']} (kept as it is)")
    return 0


def _wrapped(text: str) -> None:
    """A footnote of the run list, wrapped at :data:`WIDTH`."""
    import textwrap
    print(textwrap.fill(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False))


def _list_cell(row: dict, col: str, wide: bool = True) -> str:
    """A cell of the run list; the narrow list names a memory mode by its short label ("Optane AD",
    as the dashboards do; ``--wide`` and ``runs show`` the name ``--memory-mode`` takes)."""
    if col == "load_max":
        return _load_cell(row)
    mode = row.get("memory_mode")
    if col == "memory_mode" and not wide and isinstance(mode, str) and mode:
        return mode_look(mode).short
    return _banded(row, col)


def _show(store, run_id: int, as_json: bool) -> int:
    run = store.get_run(run_id)
    rec = RunRecord.of(run)
    steps = store.steps_frame(run_id)
    evals = store.evals_frame([run_id])
    fp = store.footprint_frame(run_id)
    load = rec.load
    run["load"] = load_summary(load)
    st = run_step_times(store, run_id, host=host_calibration()[0])   # what every view shows of the run
    if as_json:
        run["step_times"] = st.to_dict()
        run["steps"] = len(steps)
        run["last_loss"] = None if steps.empty else float(steps.loss.iloc[-1])
        run["evals"] = evals.to_dict(orient="records")
        run["footprint"] = fp.to_dict(orient="records")
        print(json.dumps(run, default=str, indent=1))
        return 0
    ts = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"  # noqa: E731
    cfg = rec.config
    print(f"run {run['id']}  {run['name'] or ''}".rstrip())
    for why in run["damaged"]:
        print(f"  damaged    {why} (kept as it is; shown as missing below)")
    print(f"  status     {run['status']}" + ("  (cancel requested)" if run["cancel_requested"] and
                                            run["status"] is RunStatus.RUNNING else ""))
    # the durations below are timed on this host even for a modeled memory mode (its kernels run on
    # DRAM here): the 'modeled' lines say what they would be on the device
    print("  time       measured on this host" + ("" if run["measured"] == Provenance.MEASURED else
                                                 " (DRAM); modeled on the device: the 'modeled' lines"))
    print(f"  config     {cfg.get('dataset')} {cfg.get('model')} layers={cfg.get('layers')} dim={cfg.get('dim')} "
          f"batch={cfg.get('batch_size')}")
    print(f"  memory     {mode_label(memory_mode_of(cfg).name, cfg.get('device_profile'))}")
    print(f"  step       {st.text()}")
    if st.placement_assumption:
        print(f"  modeled    placement: {st.placement_assumption}")
    train = modeled_seconds(run.get("train_s"), st.ratio)
    band = st.the_band
    if train is not None:
        print(f"  modeled    training {fmt_duration(train)} on {st.device} (the "
              f"{fmt_duration(run['train_s'])} measured here x {st.ratio:.2f})"
              + (f", {fmt_band(band.step)} (the step's band)" if band else ""))
    if band is not None:
        print(f"  confidence {'LOW' if band.confidence == LOW else band.confidence} (modeled numbers)"
              + "".join(f"\n             {why}" for why in band.reasons))
        for r in band.regimes:
            seen = (f"held-out error up to {r['error']:.1%} over {r['held_out_points']} point(s)"
                    + ("" if r["ok"] else ", FAILED validation") if r["held_out_points"]
                    else f"no held-out point (band {r['error']:.0%}, the target)")
            print(f"  regime     {r['bytes_share']:>4.0%} of device bytes  {r['regime']}: {seen}")
    host, _ = host_calibration()
    for why in calibration_flags(host) if host else []:
        print(f"  warning    {why}: modeled numbers projected with it are low confidence")
    if cfg.get("placement"):
        print(f"  placement  {cfg['placement']}")
    print(f"  created    {ts(run['created'])}")
    print(f"  started    {ts(run['started'])}")
    print(f"  finished   {ts(run['finished'])}")
    print(f"  duration   {fmt_duration(run['duration_s'])}" + _parts(run))
    if run["pid"]:
        print(f"  pid        {run['pid']}")
    if run["sweep"]:
        print(f"  sweep      {run['sweep']}")
    print(f"  steps      {len(steps)}" + ("" if steps.empty else f"  (last loss {steps.loss.iloc[-1]:.4f})"))
    if not evals.empty:
        last = evals.groupby(["split", "metric"], sort=True)["value"].last()
        for (split, metric), v in last.items():
            print(f"  {split:<6} {metric:<12} {_metric(metric, v)}  (last)")
        from gnnrec_lab.training.evaluate import sample_label
        for split in last.index.get_level_values(0).unique():
            label = sample_label(last[split].to_dict())
            if label:
                print(f"  {split:<6} {label}: the metrics above are not a full ranking of every user")
    if run["load"]:
        pts = ", ".join(f"{p} {load[p]['load1']:.2f}" for p in LOAD_POINTS
                        if isinstance(load.get(p), dict) and load[p].get("load1") is not None)
        steal = run["load"]["max_steal_pct"]
        print(f"  load       {pts} (1-min load average, {run['load']['cpus']} cores; measured)"
              + ("" if steal is None else f"; CPU steal up to {steal:.1f}%"))
        if run["load"]["overloaded"]:
            print(f"  warning    {load_warning(run['load'])}")
    if not fp.empty:
        for r in fp.itertuples():
            kind = "predicted (modeled)" if r.kind == Provenance.MODELED else r.kind
            print(f"  footprint  {r.tensor_class:<18} {r.bytes / 2**20:10.2f} MiB  {kind}")
    if run["error"]:
        print("  error      " + run["error"].rstrip().replace("\n", "\n             "))
    if run["stderr_tail"] and run["status"].is_crash:
        print(f"  stderr (last lines, full log in {store.home / 'runs' / str(run_id) / 'stderr.log'}):")
        for line in run["stderr_tail"].splitlines():
            print("    " + line)
    return 0


def _recover(store) -> None:
    """Mark runs whose worker vanished (so they do not show running forever); on a full disk that
    write fails, and the listing goes on with a warning instead of failing with it."""
    import sqlite3
    try:
        recover_dead(store)
    except sqlite3.OperationalError as e:
        why = describe_store_error(e, store.path)
        if why is None:
            raise
        print(f"gnnrec-lab: warning: runs whose worker is gone are still shown as running: {why}", file=sys.stderr)


def main(args) -> int:

    store = Store()
    action = getattr(args, "action", None)
    if action is None:
        _recover(store)
        return _list(store, args)
    if action == "export":
        _recover(store)
        return _export(store, args)
    if action == "rename":
        return _rename(store, args)
    if action == "delete":
        _recover(store)   # a run whose worker is gone is no longer running: it may be deleted
        return _delete(store, args)
    store.get_run(args.id)  # unknown id -> UserError, one line
    if action == "show":
        _recover(store)
        return _show(store, args.id, args.show_json or args.json)
    if action == "cancel":
        status = Runner(store, pick_up=False).cancel(args.id, grace_s=args.grace)
        print(f"run {args.id}: {status}")
        return 0
    if action == "wait":
        # picks up queued runs, so a queued run waited on does start
        runner = Runner(store)
        try:
            status = runner.wait(args.id, timeout=args.timeout)
        except TimeoutError as e:
            print(f"gnnrec-lab: {e}", file=sys.stderr)
            return 1
        print(f"run {args.id}: {status}")
        return 0 if status is RunStatus.FINISHED else 1
    raise AssertionError(action)
