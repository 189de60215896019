"""Calibration: the timeline's constants fitted to measured traces. :mod:`~harness.calibration.traces`
reads what a fit needs (its base spec, programs matched to their traces); the CLI verb
(``harness calibrate``) and ``benchmarks/calibrate_held_out.py`` are drivers of it."""
