"""Where each machine of a run is and what its processes are told: the hosts of the ip_config
(one ``HOST PORT`` line per machine), whether a host is this one, free ports for a run on this
host, and the environment DGL's server and trainer of a machine start with."""
from __future__ import annotations

import os
import socket
from pathlib import Path

from gnnrec_lab.distributed.spec import DistSpec
from gnnrec_lab.util.errors import UserError


def ip_hosts(spec: DistSpec) -> list[str]:
    """The host of each machine, in ip_config order."""
    return [ln.split()[0] for ln in Path(spec.ip_config).read_text().splitlines() if ln.strip()]


def check_ip_config(path: str, partitions: int, label: str = "ip_config", partitions_label: str = "partitions") -> None:
    """UserError naming ``label`` (the parameter, or the CLI's flag) unless ``path`` is a file of one
    ``HOST PORT`` line per machine, ``partitions`` (named ``partitions_label``) of them, blank lines aside."""
    if not Path(path).is_file():
        raise UserError(f"{label}: no such file {path!r}")
    lines = [ln.split() for ln in Path(path).read_text().splitlines() if ln.strip()]
    for n, ln in enumerate(lines, 1):
        if len(ln) != 2 or not ln[1].isdigit():
            raise UserError(f"{label}: {path}, line {n}: expected 'HOST PORT', got {' '.join(ln)!r}")
    if len(lines) != partitions:
        raise UserError(f"{label}: {len(lines)} machines listed, {partitions_label} is {partitions}")


def is_local(host: str) -> bool:
    """Whether ``host`` (an ip_config host) is this machine: a loopback name or one of its addresses."""
    if host in ("localhost", "::1") or host.startswith("127."):
        return True
    try:
        name = socket.gethostname()
        return host in {name, *socket.gethostbyname_ex(name)[2]}
    except OSError:
        return False


def free_ports(n: int) -> list[int]:
    """``n`` TCP ports free on this host now (the machines' servers and torch.distributed's master)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def process_env(spec: DistSpec, index: int, role: str) -> dict:
    """The environment of machine ``index``'s DGL ``role`` (``server`` or ``client``, the trainer):
    this process's, with DGL's and torch.distributed's settings for that process."""
    env = dict(os.environ)
    env.update({
        "DGLBACKEND": "pytorch", "DGL_ROLE": role, "DGL_SERVER_ID": str(index), "DGL_NUM_SERVER": "1",
        "DGL_NUM_CLIENT": str(spec.partitions), "DGL_NUM_SAMPLER": "0", "DGL_IP_CONFIG": spec.ip_config,
        "DGL_CONF_PATH": str(spec.path(f"parts/{spec.graph_name}.json")), "DGL_DIST_MODE": "distributed",
        "DGL_GRAPH_FORMAT": "csc", "MASTER_ADDR": ip_hosts(spec)[0], "MASTER_PORT": str(spec.master_port),
        "RANK": str(index), "WORLD_SIZE": str(spec.partitions), "OMP_NUM_THREADS": "1",
    })
    return env
