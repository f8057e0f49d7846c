"""What memory does this machine have? NUMA nodes, CPU-less nodes, persistent memory.

:func:`detect` reads ``/sys/devices/system/node`` (nodes, their CPUs and memory
size, the node distance table) and, where the tools are installed, the JSON of
``ndctl list``, ``daxctl list`` and ``ipmctl show -o json -dimm``. A node
with memory but no CPUs is what Optane configured as system RAM (KMEM DAX) and
CXL type-3 expanders look like; such nodes are reported as ``cpu_less``.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

SYS_NODE = "/sys/devices/system/node"


@dataclass
class NumaNode:
    id: int
    cpus: list            # CPU ids
    mem_total_bytes: int
    distances: list = field(default_factory=list)   # to nodes 0..n-1 (SLIT units, 10 = local)

    @property
    def cpu_less(self) -> bool:
        """Memory without CPUs: likely KMEM-DAX Optane or a CXL expander."""
        return not self.cpus and self.mem_total_bytes > 0


@dataclass
class Topology:
    nodes: list                      # NumaNode
    tools: dict                      # tool name -> parsed JSON, or {"absent": True} / {"error": "..."}
    source: str = SYS_NODE

    @property
    def node_ids(self) -> list:
        return [n.id for n in self.nodes]

    def node(self, i: int) -> Optional[NumaNode]:
        return next((n for n in self.nodes if n.id == i), None)

    def to_dict(self) -> dict:
        return {"source": self.source,
                "nodes": [asdict(n) | {"cpu_less": n.cpu_less} for n in self.nodes],
                "tools": self.tools}


def parse_cpulist(text: str) -> list:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    out = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


def read_nodes(root: str = SYS_NODE) -> list:
    """NUMA nodes found under ``root`` (a sysfs node directory); [] when it does not exist."""
    base = Path(root)
    nodes = []
    for d in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        nid = int(d.name[4:])
        cpus = parse_cpulist(_read(d / "cpulist"))
        m = re.search(r"MemTotal:\s+(\d+)\s*kB", _read(d / "meminfo"))
        mem = int(m.group(1)) * 1024 if m else 0
        dist = [int(x) for x in _read(d / "distance").split()]
        nodes.append(NumaNode(nid, cpus, mem, dist))
    return nodes


def _tool_json(cmd: list) -> dict:
    exe = shutil.which(cmd[0])
    if exe is None:
        return {"absent": True}
    try:
        res = subprocess.run([exe] + cmd[1:], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if res.returncode != 0:
        return {"error": (res.stderr or res.stdout).strip()[-300:]}
    out = res.stdout.strip()
    if not out:
        return {"devices": []}     # the tools print nothing when there is nothing to list
    try:
        return {"devices": json.loads(out)}
    except ValueError:
        return {"error": "output is not JSON", "text": out[:300]}


def detect(root: str = SYS_NODE, tools: bool = True) -> Topology:
    """This machine's memory topology (measured facts, no modeling)."""
    found = {}
    if tools:
        found["ndctl"] = _tool_json(["ndctl", "list", "--namespaces", "--regions"])
        found["daxctl"] = _tool_json(["daxctl", "list"])
        found["ipmctl"] = _tool_json(["ipmctl", "show", "-o", "json", "-dimm"])
    return Topology(read_nodes(root), found, root)
