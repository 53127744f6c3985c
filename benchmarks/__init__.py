"""Benchmarks: ``lockstep bench`` (lockbench), the detector and ingest micro-benchmarks, soaks."""
