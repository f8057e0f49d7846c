"""The bipartite user-item graph (CSR, normalisation, reordering) and neighbour sampling on it."""
