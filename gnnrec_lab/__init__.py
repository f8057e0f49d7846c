"""gnnrec-lab: GNN recommender training on tiered memory, measured and modeled."""
import os as _os

# numba's and torch's OpenMP teams spin-wait by default; on a small or shared machine the
# spinning team starves the other and a 0.3 ms SpMM takes 20-40 ms. Must precede torch's import.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from .config import RunConfig
from .errors import ConfigError, DataError, UserError

__version__ = "0.1.0"


def run(config: "RunConfig", **kw):
    """Train one run in this process and return its :class:`~gnnrec_lab.train.RunResult`."""
    from .train import train
    return train(config, **kw)


__all__ = ["RunConfig", "UserError", "ConfigError", "DataError", "run", "__version__"]
