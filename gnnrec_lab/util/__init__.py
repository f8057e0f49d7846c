"""Leaf utilities every layer may use: errors, formatting, provenance, run status, the process
runtime, ``/proc`` facts, the kernel recorder, signals, cgroups, the lab's home, pinning, and the
package's layer order (:mod:`~gnnrec_lab.util.layers`)."""
