"""Server-side cost of one Live-page poll while a run trains (no browser).

Writes a running run with ``--steps`` recorded steps (four kernels per step, fake times) into a
temporary store, renders the Live page into a Bokeh document as a served session would, then adds
one step at a time and times the page's poll: reading the store and updating the page's models.
The browser's share (drawing what changed) comes on top and is not timed here. Prints the median
and the max over ``--polls`` polls with the load average (the machine may be shared).

    .venv/bin/python benchmarks/bench_live_poll.py [--steps 1900] [--polls 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1900, help="steps recorded before the polls (default 1900)")
    ap.add_argument("--polls", type=int, default=20, help="polls timed, one new step before each (default 20)")
    args = ap.parse_args()
    os.environ["GNNREC_LAB_HOME"] = tempfile.mkdtemp(prefix="gnnrec-lab-bench-live-")
    import numpy as np
    import panel as pn
    from bokeh.document import Document

    from gnnrec_lab.config.run import RunConfig
    from gnnrec_lab.dashboard.common import Lab
    from gnnrec_lab.dashboard.live import LivePage
    from gnnrec_lab.runs.store import Store
    from gnnrec_lab.util.recorder import KernelRecord
    rng = np.random.default_rng(0)

    def records(step):
        return [KernelRecord(n, ph, -1, step, int(rng.uniform(1e6, 2e6)), 1, 1, 1, "gather", 32, 1, "native")
                for n, ph in (("spmm", "forward"), ("spmm", "backward"), ("bpr_loss", "loss"), ("adam", "optimizer"))]
    store = Store()
    rid = store.add_run(RunConfig(dataset="synth-tiny", layers=3, dim=64, epochs=1), status="running")
    store.set_fields(rid, pid=os.getpid())
    store.record_start(rid, {"steps_per_epoch": 2 * (args.steps + args.polls)})
    for s in range(1, args.steps + 1):
        store.add_step(rid, s, 1, 1.0 / s, 0.01, records(s))
    lab = Lab(store=store)
    lab.run_id = rid
    page = LivePage(lab)
    pn.panel(page).get_root(Document())
    poll = page.tick if hasattr(page, "refresh") else page.monitor.poll   # older pages re-render on watchers
    times = []
    for k in range(1, args.polls + 1):
        store.add_step(rid, args.steps + k, 1, 0.1, 0.01, records(args.steps + k))
        t = time.perf_counter()
        poll()
        times.append(time.perf_counter() - t)
    print(f"Live poll with {args.steps} steps recorded: median {statistics.median(times) * 1e3:.0f} ms, "
          f"max {max(times) * 1e3:.0f} ms over {args.polls} polls (one new step each); "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
