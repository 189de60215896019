"""Metrics, by source of truth: :mod:`~harness.metrics.hlo` and :mod:`~harness.metrics.compiled`
(the compiled program), :mod:`~harness.metrics.measured` (a measured trace),
:mod:`~harness.metrics.xprof` (XProf's terms and files), :mod:`~harness.metrics.timeline` (the
predicted schedule). Importing this package loads nothing."""
