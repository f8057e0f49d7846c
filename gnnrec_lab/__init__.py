"""gnnrec-lab: GNN recommender training on tiered memory, measured and modeled."""
from gnnrec_lab.config.run import RunConfig

# the models' declarations (their names and own options; no torch): a RunConfig built anywhere takes
# every model's options (ngcf_form) without its importer naming the models
from gnnrec_lab.models import registry as _models  # noqa: F401
from gnnrec_lab.util import runtime  # noqa: F401  (process-wide settings; must precede torch's import)
from gnnrec_lab.util.errors import ConfigError, DataError, UserError

__version__ = "0.1.0"


def run(config: "RunConfig", *, store: bool = False, **kw):
    """Train one run in this process and return its :class:`~gnnrec_lab.training.loop.RunResult`.

    ``store=True`` records it in the run store as ``gnnrec-lab run`` does (every step, the
    result, the final status), so the dashboard pages can show it; its id is then
    ``result.info["run_id"]``. Other keywords go to :func:`gnnrec_lab.training.loop.train`.
    """
    from gnnrec_lab.config.run import expect_config
    from gnnrec_lab.training.loop import train
    expect_config(config, "run")
    if store:
        from gnnrec_lab.commands.run import train_stored
        result, run_id = train_stored(config, own_sigterm=False, **kw)
        result.info["run_id"] = run_id
        return result
    return train(config, **kw)


__all__ = ["RunConfig", "UserError", "ConfigError", "DataError", "run", "__version__"]
