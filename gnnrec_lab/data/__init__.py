"""Where do interactions come from? Registry, loaders, synthetic generator, splits, cache.

>>> from gnnrec_lab.data import load
>>> ds = load("synth-tiny")            # prepared and cached on first use
>>> ds.train.shape, ds.n_users, ds.n_items

See :mod:`gnnrec_lab.data.registry` for names and the cache layout,
:mod:`~gnnrec_lab.data.readers` for file formats, :mod:`~gnnrec_lab.data.split` for
the split protocol and :mod:`~gnnrec_lab.data.synthetic` for the generator.
"""
from gnnrec_lab.data.dataset import Dataset
from gnnrec_lab.data.registry import data_dir, describe, list_datasets, load, prepare

__all__ = ["Dataset", "load", "describe", "list_datasets", "prepare", "data_dir"]
