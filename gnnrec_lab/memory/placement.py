"""Real placement of tensor classes: DRAM, NUMA policies, file-backed (App Direct) memory.

A place is one of the strings a :class:`~gnnrec_lab.config.run.RunConfig` accepts (parsed by
:mod:`gnnrec_lab.config.places`):

``dram``
    an ordinary allocation.
``numa:POLICY:NODES``
    POLICY is ``membind``, ``preferred`` or ``interleave``; NODES a list like ``1`` or ``0,2-3``.
    NUMA policy applies to a whole process, so the run's worker is started under ``numactl``
    (:func:`numa_prefix`); this is how KMEM-DAX Optane and CXL expanders (CPU-less nodes) are used.
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
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from gnnrec_lab.config.places import Place, parse_nodes, parse_place, parse_placement
from gnnrec_lab.memory.topology import Topology, detect
from gnnrec_lab.util.errors import UserError

if TYPE_CHECKING:  # annotations only: parsing a placement (config, runner) needs no numpy
    import numpy as np

SYS_NODE_DIR = Path("/sys/devices/system/node")
# Linux x86-64 values (include/uapi/asm-generic/mman-common.h, linux/mman.h)
MAP_SHARED_VALIDATE = 0x03
MAP_SYNC = 0x80000


def place_of(config, cls: str) -> Place:
    """Where ``config`` places tensor class ``cls``."""
    return parse_place((config.placement or {}).get(cls, "dram"), cls)


def file_placed(placement) -> dict:
    """``{tensor class: directory}`` of the classes placed on ``file:DIR``."""
    return {cls: p.directory for cls, p in parse_placement(placement or {}).items() if p.kind == "file"}


# ----------------------------------------------------------------------
# NUMA: a policy binds the whole worker process, applied by numactl around it
# ----------------------------------------------------------------------
def numa_request(placement: dict) -> Optional[tuple[str, list[int]]]:
    """The one process-wide NUMA policy that ``placement`` asks for, as (policy, nodes), or None.

    numactl sets the policy of the whole run, so every ``numa:`` entry must agree;
    classes placed on ``dram`` or ``file:`` are handled inside the run by this module.
    """
    wanted: dict[tuple, list[str]] = {}
    for cls, where in sorted((placement or {}).items()):
        if not str(where).startswith("numa:"):
            continue
        place = parse_place(where, cls)
        wanted.setdefault((place.policy, place.nodes), []).append(cls)
    if not wanted:
        return None
    if len(wanted) > 1:
        desc = "; ".join(f"{'+'.join(c)} -> numa:{p}:{','.join(map(str, n))}" for (p, n), c in wanted.items())
        raise UserError(f"placement: NUMA policies apply to the whole worker process (numactl binds the whole "
                        f"run to one policy), but classes ask for different ones ({desc})")
    (policy, nodes), = wanted
    if policy == "preferred" and len(nodes) != 1:
        raise UserError(f"placement: numa:preferred takes exactly one node, got {','.join(map(str, nodes))}")
    return policy, list(nodes)


def numactl_argv(placement: dict, available_nodes: Sequence[int], numactl: Optional[str] = "numactl",
                 memory_nodes: Optional[Sequence[int]] = None) -> list[str]:
    """The command prefix that applies ``placement``'s NUMA policy: ``[]`` when none is asked for.

    ``available_nodes``: NUMA nodes of this machine; ``memory_nodes``: those with
    memory (None = all); ``numactl``: path of the numactl binary, None when it is
    not installed. Raises UserError when the request cannot be honoured.
    """
    req = numa_request(placement)
    if req is None:
        return []
    policy, nodes = req
    missing = [n for n in nodes if n not in set(available_nodes)]
    if missing:
        have = ",".join(map(str, sorted(available_nodes))) or "none"
        raise UserError(f"placement: NUMA node {missing[0]} does not exist on this machine (nodes: {have})")
    if memory_nodes is not None:
        empty = [n for n in nodes if n not in set(memory_nodes)]
        if empty:
            raise UserError(f"placement: NUMA node {empty[0]} has no memory to {policy} to")
    if not numactl:
        raise UserError("placement asks for a NUMA policy but numactl is not installed "
                        "(apt-get install numactl)")
    return [numactl, f"--{policy}={','.join(map(str, nodes))}"]


def numactl_args(placement: dict, topology: Optional[Topology] = None, numactl: Optional[str] = None) -> list:
    """:func:`numactl_argv` against a detected (or given) :class:`Topology`."""
    if numa_request(placement) is None:
        return []
    topo = topology or detect(tools=False)
    return numactl_argv(placement, topo.node_ids, numactl or shutil.which("numactl"))


def _read_node_list(path: Path) -> Optional[list[int]]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return parse_nodes(text) if text else []


def system_numa_nodes() -> tuple[list[int], Optional[list[int]]]:
    """(NUMA nodes, nodes with memory or None when unknown) from /sys/devices/system/node."""
    nodes = sorted(int(p.name[4:]) for p in SYS_NODE_DIR.glob("node[0-9]*")) if SYS_NODE_DIR.is_dir() else []
    return nodes, _read_node_list(SYS_NODE_DIR / "has_memory")


def numa_prefix(config) -> list[str]:
    """numactl prefix for ``config`` on this machine (checks nodes and the binary)."""
    if numa_request(config.placement) is None:
        return []
    nodes, mem = system_numa_nodes()
    return numactl_argv(config.placement, nodes, shutil.which("numactl"), mem)


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
    import numpy as np  # here, not at import: parsing a placement (config, runner) needs no numpy
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
    import numpy as np  # here, not at import: parsing a placement (config, runner) needs no numpy
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
