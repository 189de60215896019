"""What to run: a manifest (TOML -> frozen dataclasses, :mod:`~harness.plan.manifest`) and its
variants (:mod:`~harness.plan.variants`). Nothing here imports the model or anything of the harness
above the plan: expansion (:mod:`harness.expansion`, above :mod:`harness.model`) asks the model
(each variant's config built from its preset and overrides, stage names, mesh axes, workload
sizes) and makes the variants."""
