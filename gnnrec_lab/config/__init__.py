"""What a run is: the validated RunConfig, the place syntax of a placement, parameter bounds and constraint checks."""
