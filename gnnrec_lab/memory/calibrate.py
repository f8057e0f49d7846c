"""Measure this machine: the "host" profile (measured) behind rooflines and the tier model.

What is measured (all with the lab's own numba kernels and torch, in-process):

* ``copy_GBps`` / ``triad_GBps``: STREAM-style ``b = a`` and ``a = b + s*c`` over
  float64 arrays of 128 MiB each (4x a 32 MiB last-level cache), parallel over all
  threads, best of N repeats. Bytes counted as STREAM does (2 and 3 arrays; the
  write-allocate read is not counted).
* ``gather64_GBps`` / ``gather256_GBps``: random row gathers (rows of 64 B and 256 B,
  float32) from a table of 256 MiB (128 MiB quick), 128 MiB of rows per pass,
  counting only the row bytes (the index stream is not counted).
* ``latency_ns``: dependent loads (pointer chasing along one random cycle through
  128 MiB): the average time of one hop.
* ``gemm_GFLOPs``: ``torch.mm`` of square float32 matrices (2048; 1024 quick).
* ``threads`` (numba), ``torch_threads``, ``cpu``, ``measured_at`` (UTC ISO time).

``spread`` gives best / median / worst of every measured number, so a noisy
(shared) machine shows as a wide spread rather than a wrong number.
The result is cached as JSON in ``$GNNREC_LAB_HOME/calibration.json``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gnnrec_lab.memory import preflight
from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.files import write_atomic
from gnnrec_lab.util.home import lab_home
from gnnrec_lab.util.provenance import Provenance

REQUIRED = ("copy_GBps", "triad_GBps", "gather64_GBps", "gather256_GBps", "latency_ns", "gemm_GFLOPs",
            "threads", "cpu", "measured_at")
# Sizes (module constants so tests can shrink them; the defaults dwarf a 32 MiB LLC)
STREAM_ELEMS = 16 * 2**20          # float64 elements per STREAM array (128 MiB)
CHASE_ELEMS = 16 * 2**20           # int64 entries in the pointer-chasing cycle (128 MiB)
GATHER_TABLE_BYTES = 256 * 2**20   # table the random rows come from (half when quick)
GATHER_PASS_BYTES = 128 * 2**20    # row bytes fetched per timed gather pass
CHASE_HOPS = 10_000_000            # dependent loads per timed pass (a fifth when quick)
GEMM_N = 2048                      # square GEMM size (half when quick)


# how inspect() begins its reason for a calibration file that is there but not a profile
DAMAGED = "it is damaged"


def calibration_path() -> Path:
    """``$GNNREC_LAB_HOME/calibration.json`` (``~/.gnnrec_lab`` when unset)."""
    return lab_home() / "calibration.json"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _repeat(fn: Callable[[], None], reps: int) -> np.ndarray:
    """Wall seconds of ``reps`` calls of ``fn`` (after one untimed warm call)."""
    fn()
    out = np.empty(reps)
    for i in range(reps):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out


def _rate(nbytes_or_flops: float, seconds: np.ndarray) -> dict:
    r = nbytes_or_flops / seconds / 1e9
    return {"best": float(r.max()), "median": float(np.median(r)), "worst": float(r.min())}


def measure(quick: bool = False) -> dict:
    """Measure the host now (about 5-10 s quick, ~30 s full) and return the profile dict
    (see the module docstring for keys and units). Does not write the cache."""
    import torch

    from gnnrec_lab.kernels import buffers
    from gnnrec_lab.kernels import microbench as mb
    from gnnrec_lab.kernels import native as nk
    reps = 5 if quick else 20
    th = nk.threads()
    load0 = os.getloadavg()[0]
    jit0 = time.perf_counter()
    _compile_all()
    jit = time.perf_counter() - jit0
    spread = {}

    # -- STREAM copy / triad ----------------------------------------------------
    n = STREAM_ELEMS
    a = np.ones(n)
    b = np.full(n, 2.0)
    c = np.full(n, 0.5)
    bounds = np.linspace(0, n, nk.CHUNKS_PER_THREAD * th + 1).astype(np.int64)
    spread["copy_GBps"] = _rate(2 * 8 * n, _repeat(lambda a=a, b=b: mb.stream_copy(a, b, bounds), reps))
    spread["triad_GBps"] = _rate(3 * 8 * n, _repeat(lambda a=a, b=b, c=c: mb.stream_triad(a, b, c, 3.0, bounds), reps))
    del a, b, c

    # -- random row gathers -------------------------------------------------------
    rng = np.random.default_rng(0)
    table_bytes = GATHER_TABLE_BYTES // 2 if quick else GATHER_TABLE_BYTES
    for row in (64, 256):
        D = row // 4
        # allocated as the lab allocates large tables (kernels.buffers: huge pages where the OS
        # grants them), so the ceiling is the one the kernels meet: on this VM 4 KiB pages
        # halve the 64 B rate (TLB misses under nested paging)
        table = buffers.zeros((table_bytes // row, D)).numpy()
        table += 1.0
        m = GATHER_PASS_BYTES // row
        idx = rng.integers(0, table.shape[0], m).astype(np.int64)
        gb = np.linspace(0, m, nk.CHUNKS_PER_THREAD * th + 1).astype(np.int64)
        acc = np.zeros((gb.shape[0] - 1, D), dtype=np.float32)
        def gather(table=table, idx=idx, acc=acc, gb=gb):
            return mb.gather_sum(table, idx, acc, gb)
        spread[f"gather{row}_GBps"] = _rate(m * row, _repeat(gather, max(3, reps // 2)))
        del gather
        del table

    # -- dependent-load latency ---------------------------------------------------
    order = rng.permutation(CHASE_ELEMS)
    nxt = np.empty(CHASE_ELEMS, dtype=np.int64)
    nxt[order[:-1]] = order[1:]          # one cycle through every entry (Sattolo-like)
    nxt[order[-1]] = order[0]
    del order
    hops = CHASE_HOPS // 5 if quick else CHASE_HOPS
    secs = _repeat(lambda nxt=nxt: mb.pointer_chase(nxt, hops), 3)
    ns = secs / hops * 1e9
    spread["latency_ns"] = {"best": float(ns.min()), "median": float(np.median(ns)), "worst": float(ns.max())}
    del nxt

    # -- GEMM ---------------------------------------------------------------------
    k = GEMM_N // 2 if quick else GEMM_N
    x, w = torch.randn(k, k), torch.randn(k, k)
    out = torch.empty(k, k)
    spread["gemm_GFLOPs"] = _rate(2.0 * k ** 3, _repeat(lambda: torch.mm(x, w, out=out), 3 if quick else 10))

    prof = {key: spread[key]["best"] for key in spread}
    load1 = os.getloadavg()[0]
    prof.update({
        # the 1-min load average before and after measuring (the higher is what calibration_flags checks)
        "loadavg": {"start": float(load0), "end": float(load1), "max": float(max(load0, load1))},
        "threads": th, "torch_threads": int(torch.get_num_threads()), "cpu": cpu_model(),
        "cores_online": os.cpu_count(),
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "kind": "host", "measured": True, "quick": bool(quick), "spread": spread, "jit_seconds": jit,
        "sizes": {"stream_array_bytes": 8 * STREAM_ELEMS, "gather_table_bytes": table_bytes,
                  "chase_bytes": 8 * CHASE_ELEMS, "gemm_n": k},
    })
    return prof


def _compile_all() -> None:
    """Compile (or load) the measuring kernels on tiny inputs so no timing includes the JIT."""
    from gnnrec_lab.kernels import microbench as mb
    a = np.ones(8)
    bd = np.array([0, 8], dtype=np.int64)
    mb.stream_copy(a, a.copy(), bd)
    mb.stream_triad(a, a.copy(), a.copy(), 1.0, bd)
    mb.gather_sum(np.ones((4, 4), dtype=np.float32), np.zeros(8, dtype=np.int64),
                  np.zeros((1, 4), dtype=np.float32), bd)
    mb.pointer_chase(np.zeros(2, dtype=np.int64), 2)


def save(profile: dict, path: "Path | None" = None) -> Path:
    """Write ``profile`` as JSON (atomically) and return the path. A damaged file there (not a JSON
    object) is kept beside it as ``calibration.json.damaged``, not overwritten."""
    path = Path(path) if path else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if (inspect(path)[1] or "").startswith(DAMAGED):
        os.replace(path, path.with_name(path.name + ".damaged"))
    write_atomic(path, json.dumps(profile, indent=2, sort_keys=True))
    _remember(profile, path.with_name(HISTORY))
    return path


# ----------------------------------------------------------------------
# How far a calibration can be trusted: the load it was measured under, against the best stored one
# ----------------------------------------------------------------------
HISTORY = "calibration_history.jsonl"   # one line per saved calibration, beside calibration.json
#: A calibration whose triad is more than this far below the best stored one (same CPU and threads)
#: is flagged: the machine was busier, and every ceiling and ratio taken from it is off by as much.
TRIAD_DROP = 0.25


def _remember(profile: dict, path: Path) -> None:
    """Append the numbers :func:`calibration_flags` compares to the calibration history."""
    keep = {k: profile.get(k) for k in ("measured_at", "cpu", "threads", "triad_GBps", "quick", "cores_online")}
    keep["loadavg"] = (profile.get("loadavg") or {}).get("max")
    keep["triad_spread"] = (profile.get("spread") or {}).get("triad_GBps")
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(keep, sort_keys=True) + "\n")
    except OSError:
        pass    # a read-only home keeps the calibration, not its history


def history(path: "Path | None" = None) -> list:
    """The stored calibrations' history (:data:`HISTORY`; damaged lines skipped), oldest first."""
    path = Path(path) if path else calibration_path().with_name(HISTORY)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("triad_GBps"), (int, float)):
            out.append(d)
    return out


def best_triad(prof: dict, past: "list | None" = None) -> "float | None":
    """The best STREAM triad (GB/s) of the stored calibrations of ``prof``'s CPU and thread count."""
    past = history() if past is None else past
    same = [float(h["triad_GBps"]) for h in past if h.get("cpu") == prof.get("cpu")
            and h.get("threads") == prof.get("threads")]
    return max(same) if same else None


def calibration_flags(prof: dict, past: "list | None" = None) -> list:
    """Why a host calibration (measured) may be off, one sentence each; empty when nothing is known
    against it: measured with the 1-min load average above the cores (its rates include waiting for
    other work), or a triad more than :data:`TRIAD_DROP` below the best stored calibration of this
    CPU (:func:`best_triad`). The last sentence ends with the remedy (:func:`calibration_remedy`), so
    every view that shows the flags says how to fix them. Shown by ``calibrate``, beside ``% bound``
    and in every modeled number's band (:func:`~gnnrec_lab.memory.tiermodel.model_band`)."""
    if not isinstance(prof, dict):
        return []
    out = []
    load = (prof.get("loadavg") or {}).get("max") if isinstance(prof.get("loadavg"), dict) else prof.get("loadavg")
    cores = prof.get("cores_online")
    if isinstance(load, (int, float)) and isinstance(cores, int) and cores > 0 and load > cores:
        out.append(f"host calibration of {prof.get('measured_at')} was measured under load {load:.2f} on "
                   f"{cores} cores")
    best, triad = best_triad(prof, past), prof.get("triad_GBps")
    if best and isinstance(triad, (int, float)) and triad < (1 - TRIAD_DROP) * best:
        out.append(f"host calibration of {prof.get('measured_at')} measured triad {triad:.1f} GB/s, "
                   f"{1 - triad / best:.0%} below the best stored one ({best:.1f} GB/s)")
    return with_remedy(out, cores if isinstance(cores, int) and cores > 0 else None)


#: What every flagged calibration's remedy starts with (:func:`with_remedy` looks for it).
REMEDY_COMMAND = "re-run `gnnrec-lab calibrate`"


def calibration_remedy(cores: "int | None" = None) -> str:
    """How to fix a flagged calibration, in words: re-run ``gnnrec-lab calibrate`` when the machine
    is quiet, with the load it needs (the 1-min load average below the ``cores`` online, nothing
    else running). A run keeps the flags of the calibration it was projected with; what is projected
    after the new calibration uses it."""
    below = f"below its {cores} cores" if cores else "below the number of cores"
    return (f"to fix it, {REMEDY_COMMAND} when the machine is quiet (1-min load average {below}: "
            f"no runs, tests or builds going)")


def with_remedy(flags: list, cores: "int | None" = None) -> list:
    """``flags`` (:func:`calibration_flags`' sentences, possibly stored with a run before they
    carried a remedy) with :func:`calibration_remedy` after the last one, unless one names it already."""
    flags = [f for f in flags if isinstance(f, str)]
    if not flags or any(REMEDY_COMMAND in f for f in flags):
        return flags
    if cores is None:   # a stored flag names the cores it was measured on
        found = re.search(r" on (\d+) cores", " ".join(flags))
        cores = int(found.group(1)) if found else None
    return flags[:-1] + [f"{flags[-1]}; {calibration_remedy(cores)}"]


def calibration_verdict(prof: dict, past: "list | None" = None) -> str:
    """One or two lines on a host calibration (measured): quiet (its ceilings and the modeled tiers
    taken from it are trusted as measured) or flagged (:func:`calibration_flags`: under load, or a
    triad far below the best stored one), then what that means and the remedy."""
    load = (prof.get("loadavg") or {}).get("max") if isinstance(prof.get("loadavg"), dict) else prof.get("loadavg")
    cores = prof.get("cores_online")
    at = (f"load {load:.2f} on {cores} cores" if isinstance(load, (int, float)) and isinstance(cores, int)
          else "load not recorded")
    flags = calibration_flags(prof, past)
    if not flags:
        return (f"host calibration of {prof.get('measured_at')} (measured, triad {prof.get('triad_GBps', 0):.1f} GB/s, "
                f"{at}): quiet; the roofline's ceilings, every % bound and the modeled tiers use it as measured")
    return (f"host calibration flagged: {'; '.join(flags)}\n"
            f"  meaning: every % bound and every modeled number taken from it (triad "
            f"{prof.get('triad_GBps', 0):.1f} GB/s, {at}) is marked LOW CONFIDENCE until it is re-measured")


def load(path: "Path | None" = None) -> "dict | None":
    """The cached profile, or None when there is none, it is unreadable, lacks a
    required key, or was measured on another CPU / thread count (:func:`inspect` says which)."""
    return inspect(path)[0]


def inspect(path: "Path | None" = None) -> "tuple[dict | None, str | None]":
    """``(the cached profile, None)``, or ``(None, why there is no usable one)``: none there, a file
    that is damaged (not JSON, not an object, a required key missing) or cannot be read, or one
    measured on another CPU / thread count."""
    path = Path(path) if path else calibration_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, "there is none"
    except OSError as e:
        return None, f"it cannot be read ({e.strerror})"
    try:
        prof = json.loads(text)
    except ValueError as e:
        return None, f"{DAMAGED} (not JSON: {e})"
    if not isinstance(prof, dict):
        return None, f"{DAMAGED} (a JSON {type(prof).__name__}, not an object)"
    missing = [k for k in REQUIRED if k not in prof]
    if missing:
        return None, f"{DAMAGED} (no {', '.join(missing)})"
    from gnnrec_lab.kernels import native as nk
    if prof.get("cpu") != cpu_model() or prof.get("threads") != nk.threads():
        return None, (f"it was measured on {prof.get('cpu')!r} with {prof.get('threads')} threads, this is "
                      f"{cpu_model()!r} with {nk.threads()}")
    return prof, None


def host_profile(measure_if_missing: bool = True, quick: bool = True) -> dict:
    """This host's calibration (measured): from the cache when it matches this CPU
    and thread count, else measured now (``quick``) and cached. Raises
    :class:`UserError` when there is none and ``measure_if_missing`` is False."""
    prof, why = inspect()
    if prof is not None:
        return prof
    if not measure_if_missing:
        kept = "; it is kept as it is (calibrating moves it aside)" if why.startswith(DAMAGED) else ""
        raise UserError(f"no host calibration usable at {calibration_path()}: {why}{kept}; "
                        f"run `gnnrec-lab calibrate`")
    prof = measure(quick=quick)
    try:
        save(prof)
    except OSError:
        pass  # a read-only home still gets the measured numbers, just not cached
    return prof


def load_host_profile(path=None) -> dict:
    """The host calibration: from a JSON file at ``path``, else :func:`host_profile`
    (measured quickly if missing). Raises :class:`UserError` when neither is available."""
    if path:
        try:
            d = json.loads(Path(path).read_text())
        except OSError as e:
            raise UserError(f"--host-profile: cannot read {path} ({e.strerror})") from None
        except ValueError as e:
            raise UserError(f"--host-profile: {path} is not JSON ({e})") from None
        if not isinstance(d, dict):
            raise UserError(f"--host-profile: {path} must hold one JSON object")
        return d
    return host_profile(measure_if_missing=True, quick=True)


def format_profile(prof: dict) -> str:
    """Human-readable table of a profile, each number with its unit and spread."""
    sp = prof.get("spread", {})
    rows = [("copy_GBps", "STREAM copy", "GB/s"), ("triad_GBps", "STREAM triad", "GB/s"),
            ("gather64_GBps", "random gather, 64 B rows", "GB/s"),
            ("gather256_GBps", "random gather, 256 B rows", "GB/s"),
            ("latency_ns", "dependent-load latency", "ns"), ("gemm_GFLOPs", "GEMM float32 (torch)", "GFLOP/s")]
    lines = [f"host calibration (measured) on {prof.get('cpu')}, {prof.get('threads')} threads, "
             f"{prof.get('measured_at')}{' [quick]' if prof.get('quick') else ''}"]
    for key, label, unit in rows:
        s = sp.get(key)
        extra = f"   (best {s['best']:.1f} / median {s['median']:.1f} / worst {s['worst']:.1f})" if s else ""
        lines.append(f"  {label:<28} {prof[key]:>9.1f} {unit:<8}{extra}")
    load = prof.get("loadavg") if isinstance(prof.get("loadavg"), dict) else None
    if load:
        lines.append(f"  {'1-min load average':<28} {load['start']:>9.2f} at the start, {load['end']:.2f} at the end "
                     f"({prof.get('cores_online')} cores)")
    best = best_triad(prof)
    if best:
        lines.append(f"  {'best stored triad':<28} {best:>9.1f} GB/s     (this CPU and thread count)")
    for why in calibration_flags(prof):
        lines.append(f"  warning: {why}; every % bound and modeled number taken from it is flagged")
    return "\n".join(lines)


# ----------------------------------------------------------------------
# The file tier: file-backed tensors (``--placement CLASS=file:DIR``) measured as a device profile
# ----------------------------------------------------------------------
FILE_TIER_BYTES = 512 * 2**20      # the measured file
FILE_PAGE = 4096
SEQ_BLOCK = 2**20                  # sequential transfers, 1 MiB each


def _aligned(nbytes: int):
    """A page-aligned writable buffer (O_DIRECT needs aligned memory)."""
    import mmap as _mmap
    return _mmap.mmap(-1, nbytes)


def _direct_io(fd, offsets, block: int, write: bool, threads: int, read_share: float = 1.0) -> float:
    """Seconds to move ``block`` bytes at each of ``offsets`` with ``threads`` threads (pread/pwrite
    release the GIL); with 0 < read_share < 1 every other transfer of a thread is a write."""
    from concurrent.futures import ThreadPoolExecutor

    def work(part):
        buf = _aligned(block)
        mv = memoryview(buf)
        for k, off in enumerate(part):
            w = write if read_share >= 1.0 or read_share <= 0.0 else (k % 2 == 1)
            if w:
                os.pwrite(fd, mv, int(off))
            else:
                os.preadv(fd, [mv], int(off))
        mv.release()
        buf.close()

    parts = [offsets[i::threads] for i in range(threads)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(work, parts))
    return time.perf_counter() - t0


def measure_file_tier(directory, *, file_bytes: int = FILE_TIER_BYTES, quick: bool = False) -> dict:
    """Measure the storage under ``directory`` as the miss path of the ``file:DIR`` placement (a
    ``MAP_SHARED`` file mapping whose pages the kernel reads from and writes back to that storage
    when they are not in the page cache): with direct I/O (``O_DIRECT``, so the page cache is out
    of the way), as many threads as the lab's kernels use, sequential 1 MiB and random 4 KiB reads
    and writes, a 1:1 mix of random 4 KiB reads and writes (GB/s), and the latency of one random
    4 KiB read by one thread (ns). Also ``page_cache_bytes``: the memory available now
    (:func:`preflight.available_bytes`), the page cache a run's file-backed tensors can stay in.
    Measured; raises UserError when DIR is not a writable directory or has no room."""
    from gnnrec_lab.kernels import native as nk
    d = Path(directory)
    if not d.is_dir():
        raise UserError(f"calibrate --tier file:{directory}: no such directory")
    if not os.access(d, os.W_OK):
        raise UserError(f"calibrate --tier file:{directory}: the directory is not writable")
    st = os.statvfs(d)
    if st.f_bavail * st.f_frsize < 2 * file_bytes:
        raise UserError(f"calibrate --tier file:{directory}: needs {2 * file_bytes / 2**30:.1f} GiB free, "
                        f"has {st.f_bavail * st.f_frsize / 2**30:.1f} GiB")
    import tempfile
    th = nk.threads()
    fd0, path = tempfile.mkstemp(prefix="gnnrec-file-tier-", suffix=".bin", dir=str(d))
    os.close(fd0)
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            raise UserError(f"calibrate --tier file:{directory}: direct I/O is not available there "
                            f"({e.strerror})") from None
        try:
            nblk = file_bytes // SEQ_BLOCK
            seq = [i * SEQ_BLOCK for i in range(nblk)]
            out = {"file_bytes": nblk * SEQ_BLOCK, "threads": th}
            t = _direct_io(fd, seq, SEQ_BLOCK, True, th)
            os.fsync(fd)
            out["seq_write_GBps"] = nblk * SEQ_BLOCK / t / 1e9
            out["seq_read_GBps"] = nblk * SEQ_BLOCK / _direct_io(fd, seq, SEQ_BLOCK, False, th) / 1e9
            rng = np.random.default_rng(0)
            pages = nblk * SEQ_BLOCK // FILE_PAGE
            n = 4000 if quick else 20000
            for key, write, share in (("rand_read_4k_GBps", False, 1.0), ("rand_write_4k_GBps", True, 1.0),
                                      ("mixed_1to1_4k_GBps", False, 0.5)):
                offs = (rng.integers(0, pages, n) * FILE_PAGE).tolist()
                out[key] = n * FILE_PAGE / _direct_io(fd, offs, FILE_PAGE, write, th, share) / 1e9
            os.fsync(fd)
            lat = (rng.integers(0, pages, 300 if quick else 2000) * FILE_PAGE).tolist()
            out["read_latency_ns"] = _direct_io(fd, lat, FILE_PAGE, False, 1) / len(lat) * 1e9
            wl = (rng.integers(0, pages, 300 if quick else 2000) * FILE_PAGE).tolist()
            out["write_latency_ns"] = _direct_io(fd, wl, FILE_PAGE, True, 1) / len(wl) * 1e9
        finally:
            os.close(fd)
    finally:
        os.unlink(path)
    out.update({"directory": str(d.resolve()), "page_cache_bytes": preflight.available_bytes(), "method": "O_DIRECT",
                "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "cpu": cpu_model(), "quick": bool(quick), "kind": Provenance.MEASURED, "loadavg": os.getloadavg()[0]})
    return out


def file_tier_profile(m: dict, name: str = "file_tier", page_cache_bytes: "int | None" = None) -> dict:
    """A measured file tier (:func:`measure_file_tier`) as a device-profile mapping for
    ``devices.yaml``-style files: kind ``file``, 4 KiB granularity, its own random and mixed points
    (the storage, reached when a page is not cached), ``dram_cache_bytes`` (the page cache in front
    of it: ``page_cache_bytes``, else what the measurement found available), ``baseline: host``
    (the tier is on this machine, so it is compared with this host's own DRAM calibration) and
    ``measured: true`` (its rates were measured at the run's thread count: no latency floor)."""
    cache = int(page_cache_bytes or m.get("page_cache_bytes") or 0)
    p = {
        "name": name, "kind": "file",
        "platform": f"this host ({m.get('cpu')}): file mapping in {m.get('directory')}",
        "read_bw_GBps": round(m["seq_read_GBps"], 4), "write_bw_GBps": round(m["seq_write_GBps"], 4),
        "read_latency_ns": round(m["read_latency_ns"], 1), "write_latency_ns": round(m["write_latency_ns"], 1),
        "access_granularity_bytes": FILE_PAGE,
        "random_read_GBps": {FILE_PAGE: round(m["rand_read_4k_GBps"], 4)},
        "random_write_GBps": {FILE_PAGE: round(m["rand_write_4k_GBps"], 4)},
        "mixed": {"threads": int(m["threads"]), "read_GBps": round(m["rand_read_4k_GBps"], 4),
                  "write_GBps": round(m["rand_write_4k_GBps"], 4),
                  "points": {0.5: round(m["mixed_1to1_4k_GBps"], 4)}},
        "baseline": "host", "measured": True, "conf": "high", "sources": ["MEASURED"],
        "notes": (f"measured {m.get('measured_at')} by `gnnrec-lab calibrate --tier file:{m.get('directory')}` "
                  f"with direct I/O (load {m.get('loadavg', 0):.2f}); the page cache in front holds "
                  f"{cache / 2**30:.1f} GiB"),
    }
    if cache:
        p["dram_cache_bytes"] = cache
    return p


def save_file_profile(prof: dict, path: "Path | None" = None) -> Path:
    """Write ``prof`` as a one-profile devices YAML (``$GNNREC_LAB_HOME/devices/<name>.yaml``)."""
    import yaml
    path = Path(path) if path else lab_home() / "devices" / f"{prof['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("# measured by gnnrec-lab calibrate --tier (a measured profile: use with --devices-file)\n"
                   + yaml.safe_dump({"device_profiles": [prof]}, sort_keys=False))
    os.replace(tmp, path)
    return path
