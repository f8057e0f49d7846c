"""RecBole's side of ``bench_eval.py``: run in the RecBole lane's own venv (``make recbole``,
``.venv-recbole``), never imported by the lab.

Reads the atomic files ``bench_eval.py`` wrote (``DIR/NAME/NAME.{train,valid,test}.inter``, the
lab's own split), builds RecBole 1.2.1's LightGCN at the given size with the lab model's initial
embedding table (``--weights``: users then items, in the lab's ids; untrained: ranking costs the
same whatever the weights, and the same weights make the two sides' metrics comparable), and times
``Trainer.evaluate(test_data)``, RecBole's full-sort
evaluation: every test user's scores over all items, items of the user's train and valid
interactions masked, the top K ranked, Recall/MRR/NDCG/Hit/Precision at 10 and 20. The cached
propagation (``restore_user_e``) is dropped before each repeat, so every repeat propagates once as
after a training epoch, as the lab's evaluation does. Prints one JSON object on the last line.

Usage: python _recbole_eval.py DIR NAME --weights W.npy --n-users N --dim 64 --layers 3 --repeats 3 --threads T
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("name")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--n-users", type=int, required=True)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    t0 = time.perf_counter()
    import recbole
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.general_recommender import LightGCN
    from recbole.trainer import Trainer
    from recbole.utils import init_seed
    torch.set_num_threads(a.threads)
    import_s = time.perf_counter() - t0
    cfg = dict(data_path=a.data_dir, benchmark_filename=["train", "valid", "test"],
               load_col={"inter": ["user_id", "item_id"]}, USER_ID_FIELD="user_id", ITEM_ID_FIELD="item_id",
               embedding_size=a.dim, n_layers=a.layers, reg_weight=1e-4,
               eval_args={"group_by": "user", "order": "RO", "mode": "full"},
               metrics=["Recall", "MRR", "NDCG", "Hit", "Precision"], topk=[10, 20], valid_metric="Recall@20",
               device="cpu", use_gpu=False, show_progress=False, seed=2020, reproducibility=True,
               checkpoint_dir=os.path.join(os.getcwd(), "saved"), state="WARNING")
    t1 = time.perf_counter()
    config = Config(model="LightGCN", dataset=a.name, config_dict=cfg)
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, _, test_data = data_preparation(config, dataset)
    model = LightGCN(config, train_data.dataset).to("cpu")  # the graph it propagates over: the training interactions
    import numpy as np
    table = torch.from_numpy(np.load(a.weights))
    with torch.no_grad():  # RecBole's ids are its own (0 = padding); the tokens are the lab's ids
        for field, emb, off in (("user_id", model.user_embedding, 0), ("item_id", model.item_embedding, a.n_users)):
            tokens = {t: i for t, i in dataset.field2token_id[field].items() if t != "[PAD]"}
            emb.weight[torch.tensor(list(tokens.values()))] = table[torch.tensor([off + int(t) for t in tokens])]
    trainer = Trainer(config, model)
    prep_s = time.perf_counter() - t1
    times, result = [], None
    for r in range(a.repeats + 1):  # the first is a warm-up
        model.restore_user_e = model.restore_item_e = None
        s = time.perf_counter()
        result = trainer.evaluate(test_data, load_best_model=False, show_progress=False)
        if r:
            times.append(time.perf_counter() - s)
    print(json.dumps({
        "peer": f"RecBole {recbole.__version__} Trainer.evaluate (full sort)",
        "versions": {"recbole": recbole.__version__, "torch": torch.__version__,
                     "python": sys.version.split()[0]},
        "torch_threads": torch.get_num_threads(),
        "users": int(len(test_data.uid_list)) if hasattr(test_data, "uid_list") else None,
        "n_users": int(dataset.user_num - 1), "n_items": int(dataset.item_num - 1),
        "eval_batch_size": int(config["eval_batch_size"]),
        "seconds": statistics.median(times), "all_seconds": times,
        "import_seconds": import_s, "prepare_seconds": prep_s,
        "metrics": {k.lower(): float(v) for k, v in dict(result).items()},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
