"""Persisted runs: the SQLite run store, and the runner and worker that execute runs as subprocesses."""
