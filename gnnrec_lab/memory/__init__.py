"""Memory tiers: tensor classes and their footprint, device profiles, real placement
(DRAM, NUMA, file-backed), topology detection, the calibrated tier model and guidance, the host
calibration, pre-flight checks, analysis of kernel records.

Numbers from :mod:`.tiermodel` and :mod:`.advise` are *modeled*;
:func:`gnnrec_lab.memory.footprint.measure_peak` and :func:`gnnrec_lab.memory.topology.detect`
report *measured* facts. This ``__init__`` imports nothing: importing one module of the folder (the
calibration, say) does not load the footprint's torch.
"""
