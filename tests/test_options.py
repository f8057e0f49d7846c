"""Each RunConfig option is declared once (config.run.Option, the dataclass field's metadata); the views
the rest of the lab reads (RUN_CONSTRAINTS, FIELD_DOCS, MAXIMA, the form's choices) are derived from it.
What users see must not move when the declarations do: every command's --help that carries RunConfig
flags, the words and limits of every field and a stored run's round trip are compared with
tests/golden/options.json, written from the declarations before they became Option records.
After a deliberate change of a help text or a limit: ``.venv/bin/python tests/test_options.py --write``."""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden" / "options.json"
COMMANDS = ("run", "sweep", "advise", "whatif", "distributed")
# a stored run's config as the store keeps it (RunConfig.to_json), with every kind of field set
STORED = {"dataset": "ml-100k", "model": "ngcf", "ngcf_form": "node", "layers": 2, "dim": 32, "batch_size": 512,
          "epochs": 7, "lr": 0.002, "l2": 1e-05, "optimizer": "adamw", "momentum": 0.5, "weight_decay": 0.01,
          "lr_rule": "sqrt", "ref_batch_size": 1024, "warmup_steps": 3, "warmup_epochs": 0.5, "schedule": "cosine",
          "seed": 11, "backend": "native", "precision": "bf16", "mode": "sampled", "fanouts": [5, 4],
          "topk": [5, 20], "eval_every": 2, "patience": 4, "target_recall": 0.1, "protocol": "lab",
          "sampler": "users", "eval_users": 100, "max_steps_per_epoch": 9,
          "cache_policy": "lru", "cache_size": "10%", "lookahead": 50,
          "memory_mode": "optane_memory_mode", "placement": {"embeddings": "dram"},
          "device_profile": "cxl_type3_ddr5_x8", "threads": 2, "cores": 2, "data_dir": "/tmp/d", "name": "a run"}


def _help(command: str) -> str:
    from gnnrec_lab.commands.cli import build_parser
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser().parse_args([command, "--help"])
    return out.getvalue()


def snapshot() -> dict:
    """What users see of the RunConfig options: --help texts, per-field words and limits, a round trip."""
    os.environ["COLUMNS"] = "120"   # argparse wraps at the terminal's width
    from gnnrec_lab.config import run as C
    from gnnrec_lab.dashboard.launch import FORM_CHOICES
    return {
        "help": {c: _help(c) for c in COMMANDS},
        "field_docs": {n: [d.label, d.help, d.unset] for n, d in C.FIELD_DOCS.items()},
        "field_help": {n: C.field_help(n) for n in C.FIELD_DOCS},
        "maxima": {n: C.MAXIMA[n] for n in sorted(C.MAXIMA)},
        "fields": [n for n in C.RUN_CONSTRAINTS],
        "numeric": list(C.NUMERIC_FIELDS), "optional": list(C.OPTIONAL_FIELDS), "tuples": list(C.TUPLE_FIELDS),
        "form_choices": {n: list(v) for n, v in FORM_CHOICES.items()},
        "stored_run": C.RunConfig.from_dict(STORED).to_json(),
    }


def test_what_users_see_of_the_options_is_what_it_was():
    golden, now = json.loads(GOLDEN.read_text()), snapshot()
    for key in golden:
        if isinstance(golden[key], dict):
            for k in golden[key]:
                assert now[key].get(k) == golden[key][k], f"{key}[{k!r}] changed (see this file's docstring)"
        if key == "maxima":   # seed's limit, MAX_SEED, joined MAXIMA when it became a view of the options
            assert set(now[key]) - set(golden[key]) == {"seed"}, now[key]
            continue
        assert now[key] == golden[key], f"{key} changed"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
