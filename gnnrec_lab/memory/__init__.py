"""Memory tiers: tensor classes and their footprint, device profiles, real placement
(DRAM, NUMA, file-backed), topology detection, the calibrated tier model and guidance.

Numbers from :mod:`.tiermodel` and :mod:`.advise` are *modeled*; :func:`measure_peak`
and :func:`gnnrec_lab.memory.topology.detect` report *measured* facts.
"""
from .footprint import footprint, measure_peak, peak_rss_bytes, runtime_baseline_bytes  # noqa: F401
from .profiles import DeviceProfile, get_profile, host_device, load_profiles  # noqa: F401

__all__ = ["footprint", "measure_peak", "peak_rss_bytes", "runtime_baseline_bytes", "DeviceProfile",
           "get_profile", "host_device", "load_profiles"]
