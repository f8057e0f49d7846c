"""First page load of the dashboards with 500 runs in the store (target: under 3 s).

Fills a temporary store with 500 fake finished runs (named fake-N, random
numbers, see gnnrec_lab.dashboard.fake), serves ``gnnrec-lab dashboard`` on a
free port, and loads the page REPEAT times in headless Debian chromium, each in
a fresh browser context (new session). Measured: wall time from navigation to
the Launch form being visible, and to Bokeh reporting the document idle.
Also times opening the Compare tab (the 500-row table). Prints median, min and
max with machine information.

    .venv/bin/python benchmarks/bench_dashboard_load.py [--runs 500] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import sys
import tempfile
import time

from _dashboard import launch_chromium, serve

TARGET_S = 3.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GNNREC_LAB_HOME"] = tmp
        from gnnrec_lab.dashboard.fake import fill_store
        from gnnrec_lab.runs.store import Store
        t0 = time.perf_counter()
        store = Store()
        # a few runs with kernel records (the Breakdown/Live pages), the rest steps and evals only
        fill_store(store, n_runs=10, steps=10, seed=1)
        fill_store(store, n_runs=args.runs - 10, steps=10, seed=2, kernels=False, first=10)
        store.close()
        print(f"filled store with {args.runs} fake runs in {time.perf_counter() - t0:.1f} s")

        proc, url = serve(dict(os.environ, GNNREC_LAB_HOME=tmp))
        try:
            form, idle, compare = [], [], []
            with sync_playwright() as p:
                b = launch_chromium(p)
                # one warm-up load: server-side imports of page modules happen on first use
                for i in range(args.repeat + 1):
                    ctx = b.new_context(viewport={"width": 1400, "height": 1000})
                    page = ctx.new_page()
                    idle_at = []

                    def on_console(m, idle_at=idle_at):
                        if "document idle" in m.text:
                            idle_at.append(time.perf_counter())
                    page.on("console", on_console)
                    t = time.perf_counter()
                    page.goto(url)
                    page.get_by_text("Launch a run").wait_for(timeout=60_000)
                    t_form = time.perf_counter() - t
                    end = time.perf_counter() + 30
                    while not idle_at and time.perf_counter() < end:
                        page.wait_for_timeout(20)
                    t_idle = (idle_at[0] - t) if idle_at else float("nan")
                    t = time.perf_counter()
                    page.get_by_text("Compare", exact=True).first.click()
                    page.get_by_text(f"fake-{args.runs - 1}", exact=True).first.wait_for(timeout=60_000)
                    t_cmp = time.perf_counter() - t
                    ctx.close()
                    if i == 0:
                        print(f"warm-up load: form {t_form:.2f} s, idle {t_idle:.2f} s, compare {t_cmp:.2f} s")
                        continue
                    form.append(t_form)
                    idle.append(t_idle)
                    compare.append(t_cmp)
                b.close()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)

    import psutil
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {psutil.virtual_memory().total / 2**30:.1f} GiB, "
          f"Python {platform.python_version()}")
    print(f"{args.runs} runs in the store, {args.repeat} loads (measured, seconds):")
    for name, xs in (("page load -> Launch form visible", form), ("page load -> Bokeh document idle", idle),
                     ("Compare tab -> 500-run table shown", compare)):
        print(f"  {name:<38} median {statistics.median(xs):6.2f}  min {min(xs):6.2f}  max {max(xs):6.2f}")
    med = statistics.median(form)
    print(f"target {TARGET_S:.1f} s; median/target = {med / TARGET_S:.2f} "
          f"({'meets' if med < TARGET_S else 'misses'} the target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
