"""What runs leave behind and how it is judged: versioned records on disk (:mod:`~harness.results.store`),
their provenance, statistics in one place (:mod:`~harness.results.stats`), metric-by-metric comparison
(:mod:`~harness.results.compare`), the perf gate and its committed baselines. Imports neither JAX nor
the model."""
