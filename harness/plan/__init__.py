"""What to run: a manifest (TOML -> frozen dataclasses, :mod:`~harness.plan.manifest`, no model
import) expanded once into checked variants (:mod:`~harness.plan.variants`, where the model is
asked), with each variant's config built from its preset and overrides (:mod:`~harness.plan.config`)."""
