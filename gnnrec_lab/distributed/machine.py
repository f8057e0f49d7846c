"""One machine of a run: its DGL server and its trainer as two processes (``python -m
gnnrec_lab.distributed.engine server|trainer SPEC I``) sharing the machine's private /dev/shm,
watched until the trainer is done; and the server process itself."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from gnnrec_lab.distributed.launch import ENTRY, PRIVATE_SHM_ENV, log_tail
from gnnrec_lab.distributed.network import process_env
from gnnrec_lab.distributed.spec import DistSpec

SHM_SIZE = "4g"                 # the tmpfs each machine's /dev/shm gets (allocated on use only)


def machine_main(spec_path: str, index: int) -> int:
    spec = DistSpec.load(spec_path)
    if spec.isolate and os.environ.get(PRIVATE_SHM_ENV) == "1":
        # a private tmpfs on /dev/shm: this machine's server and trainer share it, no other does
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SHM_SIZE}", "tmpfs", "/dev/shm"], check=True)
    logs = []

    def start(role):
        log = open(spec.path(f"{role}{index}.log"), "wb")
        logs.append(log)
        return subprocess.Popen([sys.executable, "-m", ENTRY, role, spec_path, str(index)],
                                env=process_env(spec, index, "server" if role == "server" else "client"),
                                stdout=log, stderr=subprocess.STDOUT)
    server = start("server")
    trainer = start("trainer")
    try:
        while trainer.poll() is None:
            if server.poll() not in (None, 0):
                trainer.kill()
                trainer.wait()
                print(f"server {index} exited with {server.returncode}:\n" + log_tail(spec.path(f"server{index}.log")))
                return 1
            time.sleep(0.2)
        rc = trainer.returncode
        try:
            server.wait(30 if rc == 0 else 1)   # servers stop when the trainers are done
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if rc != 0:
            print(f"trainer {index} exited with {rc}:\n" + log_tail(spec.path(f"trainer{index}.log")))
        return rc
    finally:
        for p in (server, trainer):
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def server_main(spec_path: str, index: int) -> int:
    spec = DistSpec.load(spec_path)
    import dgl
    dgl.distributed.initialize(spec.ip_config)   # serves until the trainers shut it down
    return 0
