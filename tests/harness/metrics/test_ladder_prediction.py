"""The layout ladder of ``experiments/v6e.toml`` and ``v7x.toml`` (MaxDiffusion's LTX-2 fixes, one
at a time, on data 2 x context 2 x tensor 2), compiled for the real slices and predicted by the
schedule simulator: what the prediction claims about each fix.

Claimed, on both slices: each fix lowers the predicted step, the exposed collective time (every
kind) and the wasted share; the Q/K/V fix ends the collective-permute exchange. Not claimed: that
the exposed all-gather *share* falls. MaxDiffusion published that for its own program (data 2 x
context 4 on v7x, ``experiments/maxdiffusion-v7x.toml``, where our predicted share falls at each
rung too); on these meshes the fixes remove all-reduces and collective-permutes first. Compiled
2026-11-29 (libtpu AOT 0.0.42.1, benchmarks/results/ladder-test-2026-11-29.md), naive ->
ffn-fixed -> ffn-qkv-fixed, exposed all-gather ms: v6e 243.8 -> 172.5 -> 122.4 (falls, but the step
falls faster at the Q/K/V fix, 1044 -> 587 ms, so its share rises 16.5 -> 20.9%); v7x 15.6 -> 30.7
-> 70.5 (rises: at the Q/K/V fix the attention's sequence exchange turns from collective-permutes,
170.1 ms exposed, into SparseCore all-gathers, and the step halves, 483 -> 247 ms).

Marked ``aot`` and ``slow``: it compiles the 19B step three times per target with libtpu (6.5 and
9.7 min a target on 2 busy cores) --
``nox -s aot -- -m aot tests/harness/metrics/test_ladder_prediction.py``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LADDER = ("naive", "naive-ffn-fixed", "naive-ffn-qkv-fixed")

pytestmark = [
    pytest.mark.aot,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("libtpu") is None, reason="needs the [tpu-aot] extra (libtpu): nox -s aot"
    ),
]


def _predicted(manifest: str, reports: Path) -> dict[str, dict]:
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        f"experiments/{manifest}",
        "--reports",
        str(reports),
        "--no-report",
        *(a for name in LADDER for a in ("--variant", name)),
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in next(reports.glob("*/results.jsonl")).read_text().splitlines()]
    out = {r["variant"]["name"]: r["stages"]["denoise_step"]["predicted"] for r in records}
    assert sorted(out) == sorted(LADDER) and all(out.values()), out.keys()
    return out


@pytest.mark.timeout(3000)  # three 19B compiles and their predictions: 6.5-9.7 min at load 4-7
@pytest.mark.parametrize("manifest", ["v6e.toml", "v7x.toml"])
def test_each_ladder_step_lowers_the_step_and_its_exposed_communication(manifest: str, tmp_path: Path) -> None:
    p = _predicted(manifest, tmp_path)
    step = [p[n]["step_s"] * 1e3 for n in LADDER]
    wasted = [p[n]["wasted_fraction"] for n in LADDER]
    exposed = [p[n]["device"]["exposed_collective_ns"] / 1e6 for n in LADDER]
    kind = [p[n]["device"]["exposed_ns_by_kind"] for n in LADDER]
    gather, permute = ([k.get(c, 0.0) / 1e6 for k in kind] for c in ("all-gather", "collective-permute"))
    rows = zip(LADDER, step, exposed, gather, permute, wasted, strict=True)
    print(
        manifest,
        [f"{n}: {s:.0f} ms, exposed {e:.1f} (AG {a:.1f}, CP {c:.1f}) ms, wasted {w:.1%}" for n, s, e, a, c, w in rows],
    )
    assert step[0] > step[1] > step[2]
    assert exposed[0] > exposed[1] > exposed[2]
    assert wasted[0] > wasted[1] > wasted[2]
    assert permute[2] < 0.01 * step[2] < permute[1]  # the Q/K/V fix ends the permute exchange
    if manifest == "v6e.toml":
        assert gather[0] > gather[1] > gather[2]
    else:  # the attention's exchange becomes all-gathers at the Q/K/V fix (module docstring)
        assert gather[2] > gather[1]
