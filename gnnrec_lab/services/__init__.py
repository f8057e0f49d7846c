"""What works on stored runs: projections onto modeled tiers, sweeps, exports, the full graph vs DistDGL comparison."""
