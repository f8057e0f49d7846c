"""The training loop and what drives it in-process: evaluation metrics, reporting, the step an
engine plugs into the loop, profiling, kernel benchmarks."""
