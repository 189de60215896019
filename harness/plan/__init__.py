"""What to run: a manifest (TOML -> frozen dataclasses, :mod:`~harness.plan.manifest`) expanded once
into checked variants (:mod:`~harness.plan.variants`). Neither imports the model: expansion asks it
through :mod:`harness.model` (each variant's config built from its preset and overrides, stage
names, mesh axes, workload sizes), imported when a manifest is expanded."""
