"""A stage's output against its reference variant's: the ``measured.accuracy`` object of a record.

Both outputs are a stage's results on the *same* inputs (the reference variant's seeded weights and
data, each leaf cast to the variant's own dtype and layout), so the difference is what the variant's
knobs do to the arithmetic: roundings moved (``bfloat16``, 16-bit partial sums), sums reassociated
(sharded contractions, another attention kernel), nothing else. An output is its array leaves by
path (``[0]``, ``['video']``), compared over all leaves together in float64:

* ``rel_l2``: ``|x - ref|_2 / |ref|_2``, every element of every leaf;
* ``max_abs``: ``max |x - ref|``;
* ``elements`` and ``leaves``: how much was compared.

Outputs are written as ``.npz`` files (one per variant and stage) under the sweep's ``outputs/``
folder, so a variant compares with a reference that ran before it, in this run or an earlier one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

Arrays = Mapping[str, np.ndarray]


def output_path(outputs_dir: str | Path, variant_id: str, stage: str) -> Path:
    """Where one variant's output of one stage is kept."""
    return Path(outputs_dir) / variant_id / f"{stage}.npz"


def save(path: str | Path, arrays: Arrays) -> None:
    """Write ``arrays`` (leaf path -> array) atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp.npz")
    with os.fdopen(fd, "wb") as f:
        leaves: dict[str, Any] = {f"leaf{i}": np.asarray(a) for i, a in enumerate(arrays.values())}
        np.savez(f, names=np.array(list(arrays)), **leaves)
    os.replace(tmp, path)


def load(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(Path(path)) as f:
        return {str(name): f[f"leaf{i}"] for i, name in enumerate(f["names"])}


def compare(output: Arrays, reference: Arrays) -> dict[str, Any]:
    """``output`` against ``reference`` (the module docstring's fields); ValueError naming the first
    leaf whose path or shape differs (the two are not the same computation)."""
    if list(output) != list(reference):
        raise ValueError(f"output leaves {list(output)} differ from the reference's {list(reference)}")
    diff_sq = ref_sq = max_abs = 0.0
    elements = 0
    for name, ref in reference.items():
        x, r = np.asarray(output[name], np.float64), np.asarray(ref, np.float64)
        if x.shape != r.shape:
            raise ValueError(f"output leaf {name} has shape {x.shape}, the reference's {r.shape}")
        d = x - r
        diff_sq += float(np.sum(d * d))
        ref_sq += float(np.sum(r * r))
        max_abs = max(max_abs, float(np.abs(d).max(initial=0.0)))
        elements += r.size
    rel = float(np.sqrt(diff_sq / ref_sq)) if ref_sq > 0 else (0.0 if diff_sq == 0 else float("inf"))
    return {"rel_l2": rel, "max_abs": max_abs, "elements": elements, "leaves": len(reference)}
