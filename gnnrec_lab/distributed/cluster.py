"""An emulated cluster on one host: one Linux network namespace per machine, for DistDGL.

Each machine gets a namespace of its own (``<prefix>h<i>``) with one veth interface
(``<prefix>v<i>``) holding its address from :data:`SUBNET`; the other end of each veth
(``<prefix>p<i>``) is a port of a bridge that lives in a further namespace (``<prefix>br``).
Every interface is created inside those namespaces, so the host's own interfaces, addresses and
routes are never touched, and two runs (each with its own random prefix) can use the same
addresses without meeting: their bridges are in different namespaces.

Each link is shaped in both directions with ``tc qdisc ... tbf`` (on the machine's interface for
what it sends, on its bridge port for what it receives); ``link_gbit=0`` leaves links unshaped.
netem is not available on every kernel; tbf is (measured here: 0.82 Gbit/s at ``rate 1gbit``).

The machines run exactly the commands a real host runs (see docs/dgl.md), prefixed with
``ip netns exec <ns>`` and ``taskset -c <cores>``; gloo is told the machine's interface with
``GLOO_SOCKET_IFNAME`` (without it gloo resolves the host name to an address outside the
namespace and fails with ``connectFullMesh failed``).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from gnnrec_lab.util.errors import UserError
from gnnrec_lab.util.pinning import allowed_cores

SUBNET = "10.251.0"          # /24, used only inside the namespaces of an emulated cluster
NS_PREFIX = "gnl"            # every name starts with this, then a per-run token
PORT = 30050                 # each machine has its own address, so one port serves them all
TBF_LATENCY = "50ms"         # how long tbf may queue a packet before dropping it


def check_possible(machines: int, cores_per_machine: int, link_gbit: float) -> None:
    """Refuse, naming the reason, a cluster this host cannot emulate: not root, ``ip``/``tc``/
    ``taskset`` missing, more cores asked for (``machines x cores_per_machine``) than there are,
    a negative link rate."""
    if os.name != "posix" or os.geteuid() != 0:
        raise UserError("--cluster emulated: needs root (it creates network namespaces, veth links and tc "
                        "qdiscs); run it as root or use --cluster local")
    for tool, pkg in (("ip", "iproute2"), ("tc", "iproute2"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            raise UserError(f"--cluster emulated: `{tool}` ({pkg}) is not on PATH")
    if cores_per_machine < 1:
        raise UserError(f"--cores-per-machine: must be a positive integer, got {cores_per_machine}")
    have = len(allowed_cores())
    if machines * cores_per_machine > have:
        raise UserError(f"--cores-per-machine: {machines} machines x {cores_per_machine} cores = "
                        f"{machines * cores_per_machine} cores, this host has {have}; each machine needs cores "
                        f"of its own")
    if not link_gbit >= 0:
        raise UserError(f"--link-gbit: must be 0 (unshaped) or a positive rate in Gbit/s, got {link_gbit}")
    if machines > 250:
        raise UserError(f"--partitions: an emulated cluster has at most 250 machines (one /24), got {machines}")


@dataclass
class Machine:
    index: int
    address: str
    namespace: str
    interface: str      # in the machine's namespace
    port: str           # its peer, a bridge port in the bridge's namespace
    cores: list


@dataclass
class EmulatedCluster:
    """``with EmulatedCluster(P, C, G) as c:`` builds the namespaces, links and qdiscs, and removes
    them (after killing whatever still runs in them) when the block ends, however it ends."""

    machines_n: int
    cores_per_machine: int
    link_gbit: float
    prefix: str = field(default_factory=lambda: NS_PREFIX + secrets.token_hex(3))
    machines: list = field(default_factory=list)
    created: list = field(default_factory=list)      # namespaces made so far, for the teardown

    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}br"

    def __enter__(self) -> "EmulatedCluster":
        check_possible(self.machines_n, self.cores_per_machine, self.link_gbit)
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def _build(self) -> None:
        cores = allowed_cores()
        br = self.bridge_ns
        self._ip("netns", "add", br)
        self.created.append(br)
        self._ip("-n", br, "link", "add", f"{self.prefix}b", "type", "bridge")
        self._ip("-n", br, "link", "set", f"{self.prefix}b", "up")
        for i in range(self.machines_n):
            m = Machine(i, f"{SUBNET}.{i + 1}", f"{self.prefix}h{i}", f"{self.prefix}v{i}", f"{self.prefix}p{i}",
                        cores[i * self.cores_per_machine:(i + 1) * self.cores_per_machine])
            self._ip("netns", "add", m.namespace)
            self.created.append(m.namespace)
            # made inside the bridge's namespace, its peer straight into the machine's: never on the host
            self._ip("-n", br, "link", "add", m.port, "type", "veth", "peer", "name", m.interface,
                     "netns", m.namespace)
            self._ip("-n", br, "link", "set", m.port, "master", f"{self.prefix}b", "up")
            self._ip("-n", m.namespace, "addr", "add", f"{m.address}/24", "dev", m.interface)
            self._ip("-n", m.namespace, "link", "set", m.interface, "up")
            self._ip("-n", m.namespace, "link", "set", "lo", "up")
            if self.link_gbit > 0:
                self._shape(m.namespace, m.interface)
                self._shape(br, m.port)
            self.machines.append(m)

    def _shape(self, ns: str, dev: str) -> None:
        rate_bytes = self.link_gbit * 1e9 / 8
        # the bucket holds 1 ms at the rate (at least 64 KiB): enough for the kernel's timer
        # granularity and GSO segments, small enough to hold the rate over milliseconds
        burst = max(64 * 1024, int(rate_bytes / 1000))
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                        "rate", f"{self.link_gbit:g}gbit", "burst", str(burst), "latency", TBF_LATENCY],
                       check=True, capture_output=True, text=True)

    @staticmethod
    def _ip(*args) -> None:
        p = subprocess.run(["ip", *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"emulated cluster: `ip {' '.join(args)}` failed: {p.stderr.strip()}")

    def command(self, index: int, cmd: list) -> list:
        """``cmd`` as machine ``index`` runs it: in its namespace, on its cores."""
        m = self.machines[index]
        return ["ip", "netns", "exec", m.namespace, "taskset", "-c", ",".join(map(str, m.cores))] + list(cmd)

    def env(self, index: int) -> dict:
        m = self.machines[index]
        return {"GLOO_SOCKET_IFNAME": m.interface, "TP_SOCKET_IFNAME": m.interface}

    def ip_config(self) -> str:
        return "".join(f"{m.address} {PORT}\n" for m in self.machines)

    def link_bytes(self) -> list[dict]:
        """Bytes each machine's interface sent and received so far (the kernel's counters, measured)."""
        out = []
        for m in self.machines:
            p = subprocess.run(["ip", "-n", m.namespace, "-s", "-j", "link", "show", m.interface],
                               capture_output=True, text=True)
            try:
                st = json.loads(p.stdout)[0]["stats64"]
                out.append({"machine": m.index, "tx_bytes": int(st["tx"]["bytes"]), "rx_bytes": int(st["rx"]["bytes"])})
            except (ValueError, LookupError):
                out.append({"machine": m.index, "tx_bytes": None, "rx_bytes": None})
        return out

    def describe(self) -> dict:
        return {"kind": "emulated", "subnet": f"{SUBNET}.0/24", "prefix": self.prefix,
                "bridge_namespace": self.bridge_ns, "link_gbit": self.link_gbit,
                "link_shaping": f"tc tbf rate {self.link_gbit:g}gbit each direction" if self.link_gbit > 0
                else "unshaped (veth)",
                "machines": [{"index": m.index, "address": m.address, "namespace": m.namespace,
                              "interface": m.interface, "cores": list(m.cores), "link_gbit": self.link_gbit}
                             for m in self.machines]}

    def teardown(self) -> None:
        """Kill every process left in the machines' namespaces, then delete the namespaces (which
        deletes their veths, the bridge and the qdiscs). Safe to call twice."""
        for ns in self.created:
            for _ in range(3):
                pids = _netns_pids(ns)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.2)
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []


def _netns_pids(ns: str) -> list[int]:
    p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split() if x.isdigit() and int(x) != os.getpid()]


def namespaces() -> list[str]:
    """Network namespaces of emulated clusters that exist now (``ip netns list``)."""
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [ln.split()[0] for ln in p.stdout.splitlines() if ln.startswith(NS_PREFIX)]
