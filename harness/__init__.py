"""Profiling and regression harness for the ltx2 pipeline: manifests, runs, metrics, reports, gates."""
