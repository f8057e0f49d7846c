"""Real placement of tensor classes: DRAM, NUMA policies, file-backed (App Direct) memory.

A place is one of the strings a :class:`~gnnrec_lab.config.RunConfig` accepts:

``dram``
    an ordinary allocation.
``numa:POLICY:NODES``
    POLICY is ``membind``, ``preferred`` or ``interleave``; NODES a list like ``1`` or ``0,2-3``.
    NUMA policy applies to a whole process, so the run's worker is started under ``numactl``
    (:func:`numactl_args`); this is how KMEM-DAX Optane and CXL expanders (CPU-less nodes) are used.
``file:DIR``
    a file-backed shared mapping in DIR (fsdax App Direct on a DAX mount; ``/dev/shm`` or a disk
    elsewhere). :func:`probe_dax` says whether DIR really is DAX.

Files of file-backed tensors are unlinked as soon as they are mapped, so they disappear
when the run ends however it ends (the mapping keeps the storage alive until then).
"""
from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import UserError
from .topology import Topology, detect, parse_cpulist

NUMA_POLICIES = ("membind", "preferred", "interleave")
# Linux x86-64 values (include/uapi/asm-generic/mman-common.h, linux/mman.h)
MAP_SHARED_VALIDATE = 0x03
MAP_SYNC = 0x80000


@dataclass(frozen=True)
class Place:
    kind: str                     # "dram" | "file" | "numa"
    directory: Optional[str] = None
    policy: Optional[str] = None
    nodes: tuple = ()

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file:{self.directory}"
        if self.kind == "numa":
            return f"numa:{self.policy}:{','.join(map(str, self.nodes))}"
        return "dram"


def parse_place(where, cls: str = "placement") -> Place:
    """Parse a place string; errors name the tensor class ``cls``."""
    if isinstance(where, Place):
        return where
    if where in (None, "", "dram"):
        return Place("dram")
    if not isinstance(where, str):
        raise UserError(f"placement: {cls}: got {where!r}, allowed: dram, file:DIR, numa:POLICY:NODES")
    if where.startswith("file:"):
        d = where[5:]
        if not d:
            raise UserError(f"placement: {cls}: 'file:' needs a directory, e.g. file:/mnt/pmem0")
        return Place("file", directory=d)
    if where.startswith("numa:"):
        parts = where.split(":")
        if len(parts) != 3 or parts[1] not in NUMA_POLICIES:
            raise UserError(f"placement: {cls}: got {where!r}, expected numa:POLICY:NODES with POLICY in "
                            f"{', '.join(NUMA_POLICIES)}")
        try:
            nodes = tuple(parse_cpulist(parts[2]))
        except ValueError:
            nodes = ()
        if not nodes:
            raise UserError(f"placement: {cls}: no NUMA nodes in {where!r} (e.g. numa:membind:1)")
        if parts[1] == "preferred" and len(nodes) != 1:
            raise UserError(f"placement: {cls}: 'preferred' takes exactly one node, got {parts[2]!r}")
        return Place("numa", policy=parts[1], nodes=nodes)
    raise UserError(f"placement: {cls}: got {where!r}, allowed: dram, file:DIR, numa:POLICY:NODES")


def numactl_args(placement: dict, topology: Optional[Topology] = None, numactl: Optional[str] = None) -> list:
    """Command prefix (``["numactl", "--membind=1"]``) to start the worker with, or ``[]``.

    All classes placed on NUMA must share one policy and node set: a NUMA policy binds the
    whole process. Raises :class:`UserError` for nodes this machine does not have and when
    ``numactl`` is not installed.
    """
    numa = {cls: parse_place(w, cls) for cls, w in (placement or {}).items()}
    numa = {cls: p for cls, p in numa.items() if p.kind == "numa"}
    if not numa:
        return []
    distinct = {p for p in numa.values()}
    if len(distinct) > 1:
        desc = ", ".join(f"{c}={p}" for c, p in sorted(numa.items()))
        raise UserError(f"placement: NUMA policies apply to the whole worker process; use one policy "
                        f"and node set for all classes, got {desc}")
    place = distinct.pop()
    topo = topology or detect(tools=False)
    missing = [n for n in place.nodes if n not in topo.node_ids]
    if missing:
        cls = sorted(numa)[0]
        have = ",".join(map(str, topo.node_ids)) or "none"
        raise UserError(f"placement: {cls}: NUMA node {missing[0]} does not exist on this machine "
                        f"(nodes: {have})")
    exe = numactl or shutil.which("numactl")
    if not exe:
        raise UserError("placement: numa placement needs the 'numactl' program, which is not installed "
                        "(apt-get install numactl)")
    nodes = ",".join(map(str, place.nodes))
    return [exe, f"--{place.policy}={nodes}"]


# ----------------------------------------------------------------------
def probe_dax(directory) -> dict:
    """Whether ``directory`` is on a DAX filesystem: try a ``MAP_SYNC`` shared mapping.

    ``MAP_SYNC`` is accepted only where stores reach persistent media without page-cache
    writeback, i.e. fsdax App Direct. Returns ``{"directory", "dax": bool, "reason",
    "fs_type", "mount_options"}`` (measured on this machine).
    """
    d = Path(directory)
    if not d.is_dir():
        raise UserError(f"placement: file:{directory}: no such directory")
    fs_type, opts = _mount_of(d)
    out = {"directory": str(d), "dax": False, "reason": "", "fs_type": fs_type, "mount_options": opts}
    try:
        fd, path = tempfile.mkstemp(prefix=".gnnrec-dax-probe-", dir=d)
    except OSError as e:
        out["reason"] = f"cannot create a file: {e.strerror}"
        return out
    try:
        os.ftruncate(fd, mmap.PAGESIZE)
        try:
            m = mmap.mmap(fd, mmap.PAGESIZE, flags=MAP_SHARED_VALIDATE | MAP_SYNC,
                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            out["reason"] = f"MAP_SYNC refused ({e.strerror}): not a DAX mapping"
        else:
            m.close()
            out["dax"] = True
            out["reason"] = "MAP_SYNC mapping accepted"
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def _mount_of(path: Path) -> tuple:
    best, fs, opts = "", "", ""
    rp = str(path.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "", ""
    for line in lines:
        parts = line.split()
        if len(parts) >= 4:
            mnt = parts[1].replace("\\040", " ")
            if (rp == mnt or rp.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fs, opts = mnt, parts[2], parts[3]
    return fs, opts


def allocate_array(shape, dtype, where="dram", name: str = "tensor") -> np.ndarray:
    """A zeroed numpy array of ``shape``/``dtype`` at ``where`` (``dram`` or ``file:DIR``).

    File-backed arrays are ``MAP_SHARED`` mappings of a file created in DIR and unlinked at
    once (storage is freed when the last reference goes). ``numa:`` places allocate ordinary
    memory: the worker's numactl policy decides where it lands.
    """
    place = parse_place(where, name)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    dtype = np.dtype(dtype)
    if place.kind != "file":
        return np.zeros(shape, dtype=dtype)
    d = Path(place.directory)
    if not d.is_dir():
        raise UserError(f"placement: {name}: file:{place.directory}: no such directory")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
    try:
        fd, path = tempfile.mkstemp(prefix=f"gnnrec-{safe}-", suffix=".bin", dir=d)
    except OSError as e:
        raise UserError(f"placement: {name}: cannot create a file in {d}: {e.strerror}") from None
    try:
        os.ftruncate(fd, max(nbytes, 1))
        with os.fdopen(fd, "r+b", closefd=False) as fh:
            arr = np.memmap(fh, dtype=dtype, mode="r+", shape=shape) if nbytes else np.zeros(shape, dtype)
    except OSError as e:
        raise UserError(f"placement: {name}: cannot map {nbytes:,} bytes in {d}: {e.strerror}") from None
    finally:
        os.close(fd)
        os.unlink(path)
    return arr


def allocate(shape, dtype, where="dram", name: str = "tensor"):
    """A zeroed ``torch.Tensor`` at ``where``; file-backed tensors share the mapping (no copy)."""
    import torch
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype if isinstance(dtype, torch.dtype) else np.dtype(dtype)
    place = parse_place(where, name)
    if place.kind != "file":
        return torch.zeros(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,),
                           dtype=torch.from_numpy(np.zeros(0, np_dtype)).dtype)
    return torch.from_numpy(allocate_array(shape, np_dtype, place, name))


def place_array(arr: np.ndarray, where="dram", name: str = "array") -> np.ndarray:
    """``arr`` at ``where``: unchanged for dram/numa, else copied into a file-backed array."""
    if parse_place(where, name).kind != "file":
        return arr
    out = allocate_array(arr.shape, arr.dtype, where, name)
    out[...] = arr
    return out


def place_tensor(t, where="dram", name: str = "tensor"):
    """``t``'s values at ``where`` (a new file-backed tensor, or ``t`` itself for dram/numa)."""
    if parse_place(where, name).kind != "file":
        return t
    import torch
    out = allocate(tuple(t.shape), t.dtype, where, name)
    with torch.no_grad():
        out.copy_(t.detach())
    return out


def backing_file(x) -> Optional[str]:
    """The file mapped under ``x``'s first byte (numpy array or CPU tensor), from
    ``/proc/self/maps``; ``None`` for anonymous memory (ordinary DRAM allocations)."""
    addr = int(x.data_ptr()) if hasattr(x, "data_ptr") else int(x.ctypes.data)
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in parts[0].split("-"))
        if lo <= addr < hi:
            path = parts[5] if len(parts) > 5 else ""
            return path if path.startswith("/") else None
    return None


def is_file_backed(x) -> bool:
    """True when ``x`` lives in a file mapping made by this module."""
    f = backing_file(x)
    return bool(f) and os.path.basename(f).startswith("gnnrec-")
