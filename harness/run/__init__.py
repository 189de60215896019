"""How variants run: each one's :class:`~harness.run.spec.WorkerSpec` handed to a launcher
(:mod:`~harness.run.launcher`), a worker process that builds, compiles, times and traces its
stages (:mod:`~harness.run.worker`), and the runner that turns outcomes into records
(:mod:`~harness.run.runner`)."""
