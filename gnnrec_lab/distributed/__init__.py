"""DistDGL-style distributed training on an emulated (or real) cluster of machines."""
