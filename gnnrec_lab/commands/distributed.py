"""``gnnrec-lab distributed``: the DistDGL baseline (DGL lane only, ``make dgl``).

Partitions the training graph with DGL's partitioner, starts one DGL server and one trainer per
partition on this host (each pair in a private mount namespace with its own /dev/shm), trains BPR
link prediction with the lab's model on sampled blocks, evaluates with the lab's full-ranking
evaluation and records a measured run with engine ``distdgl`` in the run store: per mini-batch
time split (sampling, remote fetch, compute, gradient sync), bytes between partitions (counted),
epoch time, time to the Recall@20 target. Training goes through the lab's own loop
(:func:`gnnrec_lab.training.loop.run_loop`), so epochs, evaluation, early stopping and the target are
counted as in ``gnnrec-lab run``. See :mod:`gnnrec_lab.distributed.engine`.

The command checks its flags, then launches the run through the lab's runner as the Launch page
does (:func:`~gnnrec_lab.distributed.engine.runner_request`): a worker process owns the run (its
status, its logs in the run's folder, its failure) and the command follows it
(:meth:`Runner.follow <gnnrec_lab.runs.runner.Runner.follow>`: the run's events on stderr, Ctrl-C or
SIGTERM cancels the run), then prints the result the run stored. Exit status: 0 when the run
stored a result, 1 when it failed (``run N: <its error>``), 130 / 143 when Ctrl-C / SIGTERM
cancelled it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from gnnrec_lab.commands.common import add_field_argument, bounded, field_type
from gnnrec_lab.config.checks import check, check_value
from gnnrec_lab.distributed.cluster import check_possible
from gnnrec_lab.distributed.lane import require_dgl
from gnnrec_lab.distributed.network import check_ip_config
from gnnrec_lab.distributed.spec import CLUSTERS, DIST_CONSTRAINTS, MODELS, DistSpec
from gnnrec_lab.runs.runner import Runner
from gnnrec_lab.runs.store import Store
from gnnrec_lab.training.step import target_line
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.formatting import fmt_ms


def _spec_type(name: str):
    """argparse type of DistSpec field ``name``: its constraints (DIST_CONSTRAINTS) read the text."""
    def parse(param, text):
        return check_value(param, DIST_CONSTRAINTS[name], text, text=True)
    return bounded(parse, name)


# the learning-rate rule's fields, as `gnnrec-lab run` takes them: the trainers apply the loop's
# lr of each step (models.optim.lr_at) to SparseAdam and the dense Adam alike
LR_FIELDS = ("lr_rule", "ref_batch_size", "warmup_steps", "warmup_epochs", "schedule")


def register(sub):
    p = sub.add_parser("distributed", help="DistDGL sampled training on a partitioned graph (DGL lane)",
                       description=__doc__.splitlines()[0])
    add_field_argument(p, "dataset", default="synth-gowalla")
    p.add_argument("--model", default="lightgcn",
                   help=f"recommender to train, {' or '.join(MODELS)} (default: %(default)s)")
    add_field_argument(p, "layers", default=2)
    add_field_argument(p, "dim")
    p.add_argument("--partitions", type=_spec_type("partitions"), default=2,
                   help="graph partitions, one simulated machine (a server and a trainer) each (default: %(default)s)")
    p.add_argument("--fanouts", type=field_type("fanouts"), default=None,
                   help="neighbours sampled per node at each layer, first hop first, comma-separated, one per "
                        "layer (default: 10 per layer)")
    p.add_argument("--batch-size", type=field_type("batch_size"), default=2048,
                   help="training triples (user, positive item, sampled negative item) per step over all trainers; "
                        "each trainer takes batch size / partitions (default: %(default)s)")
    p.add_argument("--epochs", type=field_type("epochs"), default=1,
                   help="passes over the training interactions, counted from 1 as in `gnnrec-lab run` "
                        "(default: %(default)s)")
    for name in ("lr", *LR_FIELDS, "l2", "seed", "eval_every", "eval_users", "target_recall", "max_steps_per_epoch",
                 "sampler"):
        add_field_argument(p, name)
    p.add_argument("--target-of", type=_spec_type("target_of"), default=None, metavar="RUN_ID",
                   help="set the target to --target-fraction of the best validation Recall@20 of finished "
                        "full-graph run RUN_ID (same dataset, model, layers, batch size, seed and eval users); "
                        "not with --target-recall (default: no reference run)")
    p.add_argument("--target-fraction", type=_spec_type("target_fraction"), default=None,
                   help="with --target-of: the share of that run's best validation Recall@20 to reach "
                        "(default: 0.95)")
    p.add_argument("--part-method", default="metis", choices=("metis", "random"),
                   help="how DGL splits the graph: metis (few edges cut) or random (default: %(default)s)")
    p.add_argument("--ip-config", default=None,
                   help="file with one 'HOST PORT' line per machine, for real machines (default: every machine on "
                        "127.0.0.1, one port each)")
    p.add_argument("--cluster", default="local", choices=CLUSTERS,
                   help="local: every machine a process group on 127.0.0.1 sharing this host's cores; emulated: "
                        "every machine a network namespace with its own address, C cores and a shaped link, "
                        "started as on real hosts (root; default: %(default)s)")
    p.add_argument("--cores-per-machine", type=_spec_type("cores_per_machine"), default=1,
                   help="emulated cluster: cores each machine's server and trainer are pinned to "
                        "(default: %(default)s)")
    p.add_argument("--link-gbit", type=_spec_type("link_gbit"), default=10.0,
                   help="emulated cluster: each link's rate in Gbit/s (tc tbf), 0 leaves links unshaped "
                        "(default: %(default)s)")
    p.add_argument("--timeout", type=_spec_type("timeout_s"), default=3600.0,
                   help="seconds after which every machine is stopped and the run fails (default: %(default)s)")
    p.add_argument("--keep-partitions", action="store_true", help="keep the partition files in the run folder")
    p.add_argument("--shared-shm", action="store_true",
                   help="do NOT give each machine a private /dev/shm (shows the silent corruption; the row "
                        "check then fails the run)")
    p.add_argument("--patience", type=field_type("patience"), default=0,
                   help="stop after this many epochs without a new best validation Recall@20, 0 never "
                        "(train.py's rule; default: %(default)s)")
    add_field_argument(p, "name")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=main)


def _check(args):
    if args.fanouts is None:
        args.fanouts = [10] * args.layers
    # the flags that make the DistSpec, checked with its table (named as flags)
    flags = ("model", "layers", "dim", "partitions", "fanouts", "batch_size", "epochs", "eval_every", "cluster",
             "cores_per_machine", "link_gbit")
    check({k: DIST_CONSTRAINTS[k] for k in flags}, {k: getattr(args, k) for k in flags},
          label=lambda k: f"--{k.replace('_', '-')}")
    if args.cluster == "emulated":
        if args.ip_config is not None:
            raise UserError("--ip-config: not with --cluster emulated, which makes its own (one address per machine)")
        if args.shared_shm:
            raise UserError("--shared-shm: only with --cluster local")
        check_possible(args.partitions, args.cores_per_machine, args.link_gbit)
    if args.target_of is not None and args.target_recall is not None:
        raise UserError("--target-of: not with --target-recall (one target: a value, or a share of a run's best)")
    if args.target_fraction is not None and args.target_of is None:
        raise UserError("--target-fraction: only with --target-of RUN_ID")
    if args.ip_config is not None:
        check_ip_config(args.ip_config, args.partitions, "--ip-config", "--partitions")


def spec_of(args, home) -> DistSpec:
    """The DistSpec of checked flags ``args`` (its work folder and graph name are set once the
    run has an id), every field the flags set given explicitly: the command's own defaults (2
    layers, 1 epoch, patience 0, ...), not RunConfig's, which DistSpec's shared fields take."""
    return DistSpec(workdir=".", graph_name="pending",
                    partitions=args.partitions, dataset=args.dataset, model=args.model, layers=args.layers,
                    dim=args.dim, fanouts=list(args.fanouts), batch_size=args.batch_size, epochs=args.epochs,
                    lr=args.lr, **{k: getattr(args, k) for k in LR_FIELDS}, l2=args.l2, seed=args.seed,
                    eval_every=args.eval_every, eval_users=args.eval_users,
                    target_recall=args.target_recall, max_steps_per_epoch=args.max_steps_per_epoch,
                    sampler=args.sampler, patience=args.patience, data_dir=None, home=str(home),
                    ip_config=args.ip_config or "",
                    isolate=not args.shared_shm, cluster=args.cluster, cores_per_machine=args.cores_per_machine,
                    link_gbit=args.link_gbit, timeout_s=args.timeout)


def runner_options(args, spec: DistSpec) -> dict:
    """:func:`~gnnrec_lab.distributed.engine.runner_request`'s keyword arguments from the checked
    flags ``args`` and the run's ``spec`` (its target's origin, set by --target-of): every flag that is
    not a RunConfig field. The ip_config file is named by its absolute path (the worker reads it)."""
    return dict(cluster=args.cluster, cores_per_machine=args.cores_per_machine, link_gbit=args.link_gbit,
                timeout_s=args.timeout, part_method=args.part_method,
                ip_config=str(Path(args.ip_config).resolve()) if args.ip_config else "",
                isolate=not args.shared_shm, keep_partitions=args.keep_partitions, target_of=spec.target_of,
                target_fraction=spec.target_fraction, target_reference=spec.target_reference)


def main(args) -> int:
    # numpy and the training code: loaded by a run, not by the CLI's start
    from gnnrec_lab.distributed import engine as D
    from gnnrec_lab.distributed.results import PHASES
    _check(args)
    require_dgl()
    store = Store()
    # the spec first: the config the store records is its run_config()
    spec = spec_of(args, store.home)
    if args.target_of is not None:
        from gnnrec_lab.services.comparison import TARGET_FRACTION, reference_target  # pandas
        target = reference_target(store, args.target_of, spec.run_config(),
                                  TARGET_FRACTION if args.target_fraction is None else args.target_fraction)
        for k, v in target.items():
            setattr(spec, k, v)
    config = spec.run_config(name=args.name or f"distdgl {args.partitions} partitions")
    request = D.runner_request(config, args.partitions, **runner_options(args, spec))  # refused before it is queued
    runner = Runner(store)
    run_id = runner.launch(config, **request)
    say = (lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"run {run_id}: launched through the runner; its worker's logs are in {store.run_dir(run_id)}")
    status, signum = runner.follow(run_id, progress=say)
    run = store.get_run(run_id)
    result = run["result"]
    if signum is not None or status.is_crash or not result:   # failed, oom, or ended before a result
        print(f"gnnrec-lab: error: run {run_id}: {(run['error'] or str(status)).rstrip()}", file=sys.stderr)
        return 128 + signum if signum is not None else 1
    result["run_id"] = run_id
    if args.json:
        print(json.dumps(result, default=float))
        return 0
    d = result["distributed"]
    med = d["batch_seconds_median"]
    print(f"run {run_id}: DistDGL, {args.partitions} partitions, {result['steps']} steps/trainer, "
          f"epoch {sum(result['epoch_seconds']) / max(1, len(result['epoch_seconds'])):.2f} s (measured)")
    print("per mini-batch (median over all trainers, measured): " + ", ".join(
        f"{k} {fmt_ms(med[k])}" for k in PHASES) + f"; batch {fmt_ms(med['total'])}; "
          f"phases sum to {d['phase_sum_over_batch'] * 100:.1f}% of the batch time (means)")
    if d.get("glue_seconds_median"):
        glue = d["glue_seconds_median"]
        print("the lab's glue inside those phases (median, measured): " + ", ".join(
            f"{k.replace('_', ' ')} {fmt_ms(v)}" for k, v in glue.items())
              + f"; {d['glue_share_of_batch'] * 100:.1f}% of the batch")
    b = d["bytes_between_partitions"]
    print(f"between partitions (counted): {b['per_batch'] / 2**20:.2f} MiB per batch "
          f"(fetch {b['embedding_fetch'] / 2**20:.1f}, gradients {b['gradient_push'] / 2**20:.1f}, "
          f"sampled edges {b['sampled_edges'] / 2**20:.1f} MiB in all); {d['input_nodes_per_batch']:.0f} input nodes "
          f"per batch = {d['explosion_factor'] * 100:.1f}% of the graph (neighbourhood explosion)")
    v = result["best_valid"]
    print(f"best valid recall@20 {v.get('recall@20', float('nan')):.4f} (epoch {result['best_epoch']} of "
          f"{result['epochs']}), test recall@20 {result['test'].get('recall@20', float('nan')):.4f}")
    print(f"target: {target_line(result['target'])}")
    for k in ("diverged", "stopped"):
        if k in result["info"]:
            print(result["info"][k])
    return 0
