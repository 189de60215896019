"""The worker's side of the accuracy metric (:mod:`harness.metrics.measured.accuracy`): a stage's output on
its reference variant's inputs, against the reference's own output.

The reference variant keeps its output of each stage (its seeded weights and data, ``spec.seed``).
A variant with a reference builds the reference's stage program, makes the reference's arguments
with the same seed, casts and lays each leaf out as its own program takes it (its dtype, its
sharding; a leaf of the same size in another shape, such as layers regrouped into pipeline stages,
is reshaped), runs its own program once on them and compares. So both outputs come from the same
weights and data (rounded once to the variant's dtype where it differs): the difference is the
variant's arithmetic. A comparison that cannot be made (the reference has not run, another tree of
arguments) is a note, never a failed stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from harness.metrics.measured.accuracy import compare, load, output_path, save
from harness.run.spec import WorkerSpec


def output_arrays(tree: Any) -> dict[str, np.ndarray]:
    """A stage's output as host arrays by leaf path (floating leaves widened to float32 or more)."""
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            x = np.asarray(jax.device_get(leaf))
            if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize < 4:
                x = x.astype(np.float32)
            out[jax.tree_util.keystr(path) or "[]"] = x
    return out


def like(args: Any, abstract: Any) -> Any:
    """``args`` (another program's concrete arguments) in the dtypes, shapes and shardings of
    ``abstract``; ValueError when the trees differ or a leaf's size does."""
    if str(jax.tree.structure(args)) != str(jax.tree.structure(abstract)):
        raise ValueError("the reference's arguments are another tree than this variant's")

    def one(x: Any, a: Any) -> Any:
        x = jnp.asarray(x)
        if x.shape != tuple(a.shape):
            if x.size != math.prod(a.shape):
                raise ValueError(f"a reference argument of shape {x.shape} against this variant's {tuple(a.shape)}")
            x = x.reshape(a.shape)
        if x.dtype != a.dtype:  # a PRNG key leaf has no astype: cast only where the dtypes differ
            x = x.astype(a.dtype)
        sharding = getattr(a, "sharding", None)
        return jax.device_put(x, sharding) if sharding is not None else x

    return jax.tree.map(one, args, abstract)


def stage_accuracy(
    name: str,
    stage: Any,
    spec: WorkerSpec,
    build_reference: Callable[[str], Any] | None,
    notes: list[str],
) -> dict[str, Any] | None:
    """Keep this stage's output when others compare with it; compare it with the reference's when
    the variant has one (``measured.accuracy``: the reference's name and the fields of
    :func:`harness.metrics.measured.accuracy.compare`)."""
    if spec.outputs_dir is None:
        return None
    if spec.save_output:
        save(output_path(spec.outputs_dir, spec.variant_id, name), output_arrays(stage.run()))
    ref = spec.reference
    if ref is None or build_reference is None:
        return None
    ref_file = output_path(spec.outputs_dir, ref["id"], name)
    if not ref_file.exists():
        notes.append(f"accuracy: not compared, no output of reference {ref['name']} for {name} (not run, or failed)")
        return None
    try:
        program = build_reference(name).program
        args = like(program.make_args(spec.seed), stage.program.abstract_args)
        out = output_arrays(jax.block_until_ready(stage.program.run(*args)))
        return {"reference": ref["name"], **compare(out, load(ref_file))}
    except ValueError as e:
        notes.append(f"accuracy: not compared with {ref['name']} ({e})")
        return None
