"""Where the lab keeps its state: the run store, the host calibration, measured device profiles
and (unless a run names its own data directory) the prepared datasets."""
from __future__ import annotations

import os
from pathlib import Path


def lab_home(home: "str | os.PathLike | None" = None) -> Path:
    """The lab's state directory: ``home`` if given, else ``$GNNREC_LAB_HOME``, else ``~/.gnnrec_lab``."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("GNNREC_LAB_HOME")
    return Path(env).expanduser() if env else Path.home() / ".gnnrec_lab"
