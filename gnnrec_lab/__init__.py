"""gnnrec-lab: GNN recommender training on tiered memory, measured and modeled."""
from . import runtime  # noqa: F401  (process-wide settings; must precede torch's import)
from .config import RunConfig
from .errors import ConfigError, DataError, UserError

__version__ = "0.1.0"


def run(config: "RunConfig", **kw):
    """Train one run in this process and return its :class:`~gnnrec_lab.train.RunResult`."""
    from .config import expect_config
    from .train import train
    expect_config(config, "run")
    return train(config, **kw)


__all__ = ["RunConfig", "UserError", "ConfigError", "DataError", "run", "__version__"]
