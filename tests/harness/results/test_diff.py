"""harness.results.diff: per-scope and per-category deltas with intervals, on real traces of a small
scoped program (an extra matmul inside ``ff``), an A/A pair, collective deltas and speedup rules."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.commands import diff as diff_command
from harness.metrics.compiled.attribution import instruction_scopes
from harness.metrics.hlo import parse
from harness.metrics.measured.trace import analyze_trace, capture_trace
from harness.report.console import WIDTH, format_diff
from harness.results.diff import DIFFERENT_WORKLOAD, STEP, diff_stage
from harness.results.stats import DIFF_BATCHES
from ltx2 import scopes
from tests.harness.fixtures import synthetic

N = 384  # [N, N] float32 matmuls: ~0.1 GFLOP each, milliseconds on one CPU core
FF = "transformer/block/ff"


def _block(extra: bool):
    """attn1 (one matmul) then ff (one matmul; with ``extra``, an [N, 8N] x [8N, N] pair more: 16x the
    FLOPs in two ops, so the ops' own time, not the gaps between more ops, is what grows)."""

    def f(x: jax.Array, w: jax.Array, up: jax.Array, down: jax.Array) -> jax.Array:
        with scopes.scope(scopes.TRANSFORMER), scopes.scope(scopes.BLOCK):
            with scopes.scope(scopes.ATTN1):
                h = jnp.tanh(x @ w)
            with scopes.scope(scopes.FF):
                y = jnp.tanh(h @ w)
                if extra:
                    y = jnp.tanh(y @ up) @ down
        return y

    return jax.jit(f)


def _trace(fn, args, log_dir: Path, steps: int) -> dict:
    compiled = fn.lower(*args).compile()
    names = instruction_scopes(parse(compiled.as_text()), scopes.scope_path)
    jax.block_until_ready(compiled(*args))  # warm
    xplane = capture_trace(lambda: compiled(*args), log_dir, steps=steps)
    return analyze_trace(xplane, modules={names.module}, scopes=names).to_dict()


def _interleaved(fns: tuple, args: tuple, log_dir: Path, rounds: int, steps: int) -> list[dict]:
    """One trace per program, taken in ``rounds`` interleaved rounds of ``steps`` calls (base's round,
    head's round, ...) and joined in order: a round is one of a side's DIFF_BATCHES batches, and the
    machine's slow spells fall on both sides' rounds alike, not on one side's whole run."""
    compiled = [fn.lower(*args).compile() for fn in fns]
    names = [instruction_scopes(parse(c.as_text()), scopes.scope_path) for c in compiled]
    for c in compiled:
        jax.block_until_ready(c(*args))  # warm
    sides: list[list[dict]] = [[] for _ in fns]
    for r in range(rounds):
        for i, (c, n) in enumerate(zip(compiled, names, strict=True)):
            xplane = capture_trace(lambda c=c: c(*args), log_dir / f"{i}-{r}", steps=steps)
            sides[i].append(analyze_trace(xplane, modules={n.module}, scopes=n).to_dict())
    return [{**s[0], "step_samples": [x for t in s for x in t["step_samples"]]} for s in sides]


def _record(name: str, trace: dict, **config) -> object:
    raw = synthetic.minimal(name, {"s": {"trace": trace}})
    raw["config"].update(config)
    return synthetic.records([raw])[0]


def _args() -> tuple[jax.Array, ...]:
    rng = np.random.default_rng(0)
    return tuple(
        jnp.asarray(rng.standard_normal(shape) / np.sqrt(shape[0]), jnp.float32)
        for shape in ((N, N), (N, N), (N, 8 * N), (8 * N, N))
    )


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    args = _args()
    return [_trace(_block(False), args, tmp_path_factory.mktemp(f"aa{i}"), steps=32) for i in range(A_A_TRACES)]


ROUNDS, ROUND_STEPS = DIFF_BATCHES, 32  # a side: 4 interleaved rounds of 32 calls, a round a batch
ATTEMPTS = 10
Q_LOADED = 0.5  # an attempt's miss rate measured under load, rounded up (see the test's docstring)


def ff_attempt(args: tuple[jax.Array, ...], log_dir: Path) -> list[str]:
    """One fresh interleaved capture of both programs and its diff: what it failed to show ([]: all)."""
    base, slow = _interleaved((_block(False), _block(True)), args, log_dir, ROUNDS, ROUND_STEPS)
    assert len(base["step_samples"]) == ROUNDS * ROUND_STEPS and base["scope_coverage"] > 0.9
    d = diff_stage(_record("base", base), _record("slow", slow), "s")
    ff = next(s for s in d.scopes if s.key == FF)
    assert d.step is not None
    text = format_diff(d)
    assert FF in text and max(len(line) for line in text.splitlines()) <= WIDTH
    shares = [(s.key, s.share) for s in d.scopes]
    checks = {
        f"step {d.step.base_ns / 1e6:.2f} -> {d.step.head_ns / 1e6:.2f} ms, ci {d.step.ci} significant": (
            d.step.delta_ns > 0 and d.step.significant
        ),
        f"ff share >= 0.8: {shares}": ff.share is not None and ff.share >= 0.8,
        f"ff ci {ff.ci} above 0": ff.significant and ff.ci is not None and ff.ci[0] > 0,
        f"ff the largest delta, not {d.scopes[0].key}": d.scopes[0].key == FF,
    }
    return [what for what, ok in checks.items() if not ok]


def test_an_extra_matmul_in_ff_is_attributed_to_ff(tmp_path):
    """The extra [N, 8N] x [8N, N] pair in ff (~9x the step's FLOPs) is ff's delta, >= 80 % of the
    step's and the largest, and the step's and ff's intervals both exclude 0.

    An attempt is a fresh capture of both programs in interleaved rounds. Its intervals rest on 4
    batch means a side (Welch t, ~3 degrees of freedom, at Bonferroni's confidence: what keeps A/A
    diffs at their 5 %), so a slow spell of a loaded machine on one of the head's rounds widens them
    past 0: with two busy loops beside the other sessions (load 4.6-9.1) 8 of 32 attempts missed,
    q = 0.25, 95 % upper bound 0.41 (benchmarks/results/diff-power-2026-11-29.md; the old design,
    one capture a side, failed 2 of 6 runs at load 4-6). The test fails only when all ATTEMPTS
    attempts miss; taken as independent (separate captures, seconds apart: an assumption), that is
    Q_LOADED ** 10 = 9.8e-4 (0.41 ** 10 = 1.2e-4), far less at ordinary load; unloaded, the first
    attempt passes (~5 s). A diff that no longer flags or attributes the matmul fails every one."""
    assert Q_LOADED**ATTEMPTS < 1e-3
    args, failed = _args(), []
    for attempt in range(ATTEMPTS):
        failed.append(ff_attempt(args, tmp_path / str(attempt)))
        if not failed[-1]:
            return
    pytest.fail(f"no attempt of {ATTEMPTS} showed the extra matmul in ff: {failed}")


A_A_TRACES = 12
A_A_MAX_FLAGGED = 5


def false_failure(rate: float) -> float:
    """P(more than A_A_MAX_FLAGGED of A_A_TRACES independent traces flag) when each flags at ``rate``."""
    n = A_A_TRACES
    return sum(math.comb(n, k) * rate**k * (1 - rate) ** (n - k) for k in range(A_A_MAX_FLAGGED + 1, n + 1))


def test_a_a_diffs_flag_no_more_than_the_intervals_allow(traces):
    """12 traces of 32 calls of one program, each split into its first and last 16 calls (the drift
    within a run included): a diff's intervals hold 0 all at once with >= 95 % probability
    (Bonferroni over the stage's parts, batches of calls as the unit), so each trace flags with
    probability <= 0.05, independently of the others (separate captures). The test fails when more
    than 5 of 12 flag: binomial tail 1.1e-5 at 5 %, and 5.4e-4 at 10 %, the worst rate measured
    within a run (others kept 1.6-1.9 of 2 cores busy; calls as independent samples: 42 %),
    both < 1/1000 (benchmarks/results/aa-intervals-2026-11-29.md)."""
    assert false_failure(0.05) < 1e-4 and false_failure(0.10) < 1e-3
    flagged = []
    for trace in traces:
        samples = trace["step_samples"]
        a = _record("a", {**trace, "step_samples": samples[:16]})
        b = _record("b", {**trace, "step_samples": samples[16:]})
        d = diff_stage(a, b, "s")
        assert d.steps == (16, 16)
        parts = (d.step, *d.categories, *d.scopes)
        flagged.append([(x.key, x.delta_ns, x.ci) for x in parts if x is not None and x.significant])
    assert sum(bool(f) for f in flagged) <= A_A_MAX_FLAGGED, [f for f in flagged if f]


def test_collective_deltas_by_scope_and_speedup_only_for_the_same_workload():
    def static(count: float, nbytes: float) -> dict:
        return {
            "attribution": {
                "by_scope": {"transformer/block/ff": {"collectives": {"all-gather": {"count": count, "bytes": nbytes}}}}
            }
        }

    def rec(name: str, count: float, samples: list[float], **config) -> object:
        raw = synthetic.minimal(
            name, {"s": {"static": static(count, count * 1024), "measured": {"samples_s": samples}}}
        )
        raw["config"].update(config)
        return synthetic.records([raw])[0]

    base = rec("base", 2, [2.0, 2.0, 2.0])
    d = diff_stage(base, rec("head", 3, [1.0, 1.0, 1.0]), "s")
    (c,) = d.collectives
    assert (c.scope, c.kind, c.base_count, c.head_count, c.head_bytes - c.base_bytes) == (FF, "all-gather", 2, 3, 1024)
    assert d.speedup == 2.0 and d.step is None  # no trace samples: no time deltas, the speedup still
    other = diff_stage(base, rec("tiny", 2, [1.0], preset="tiny"), "s")
    assert other.speedup is None and other.speedup_note == DIFFERENT_WORKLOAD
    bigger = diff_stage(base, rec("big", 2, [1.0], workload={"height": 512}), "s")
    assert bigger.speedup_note == DIFFERENT_WORKLOAD


def test_step_row_and_shares_add_up():
    def trace(windows: list[float], ff: list[float]) -> dict:
        return {
            "step_samples": [
                {"window_ns": w, "categories": {"compute": f, "idle": w - f}, "by_scope": {FF: f}}
                for w, f in zip(windows, ff, strict=True)
            ]
        }

    d = diff_stage(
        _record("a", trace([10, 11, 10, 11], [5, 5, 5, 5])), _record("b", trace([14, 15, 14, 15], [9, 9, 9, 9])), "s"
    )
    assert d.step is not None and d.step.key == STEP and d.step.delta_ns == 4
    assert {c.key: c.share for c in d.categories} == {"compute": 1.0, "idle": 0.0}
    assert d.scopes[0].share == 1.0 and d.scopes[0].ci == (4.0, 4.0)


def test_cli_diff_of_two_variants_and_bad_input(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    rows = [synthetic.minimal(n, {"s": {"measured": {"samples_s": [t]}}}) for n, t in (("a", 2.0), ("b", 1.0))]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from harness import cli

    assert cli.main(["diff", "a", "b", "--results", str(results), "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "b vs a / s: speedup 2.00x" in out and (tmp_path / "d.json").exists()
    assert cli.main(["diff", "a", "zz", "--results", str(results)]) == 2
    assert "no variant 'zz'" in capsys.readouterr().err
    assert cli.main(["diff", str(results), str(results), "--variant", "b"]) == 0
    assert cli.main(["diff", "a", "b"]) == 2  # names without --results
    assert diff_command.HELP


def test_cli_diff_against_a_revision(tmp_path, capsys):
    """--against HEAD: the manifest's variant from the committed tree (base) and this one (head)."""
    import shutil

    from harness import cli

    repo = Path(__file__).resolve().parents[3]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("needs a git checkout")
    manifest = tmp_path / "aa.toml"
    manifest.write_text(
        'schema_version = 1\n[target]\nplatform = "cpu"\ndevices = 1\nmesh = { data = 1 }\n'
        '[model]\npreset = "test:ok"\n[run]\nrepeats = 3\nwarmup = 0\ntimeout_s = 60\n'
        'metrics = ["static", "measured"]\n[[variants]]\nname = "sleep"\n'
        'overrides = { "test.run_s" = 0.001 }\n'
    )
    reports = str(tmp_path / "r")
    code = cli.main(["diff", str(manifest), "--against", "HEAD", "--variant", "sleep", "--reports", reports])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "sleep vs sleep / denoise_step: speedup" in captured.out and "round 1/1 base: sleep" in captured.err
    assert cli.main(["diff", str(manifest), "--against", "HEAD", "--variant", "nope", "--reports", reports]) == 2
    assert cli.main(["diff", "a", "b", "--against", "HEAD"]) == 2


def test_a_host_loop_against_one_program_says_what_its_calls_hold():
    """The Python denoising loop against the scanned one: the diff says which side is a host loop,
    how many program calls one of its traced calls runs, and that its idle holds the host's gaps."""

    def record(name: str, host_loop: bool, calls: int) -> object:
        stage = {"predicted": synthetic.predicted(0.01, calls=calls, host_loop=host_loop)}
        return synthetic.records([synthetic.minimal(name, {"denoise_loop": stage})])[0]

    scan, loop = record("pipeline", False, 1), record("python-loop", True, 4)
    d = diff_stage(scan, loop, "denoise_loop")
    assert d.note.startswith("python-loop's denoise_loop is a host loop: one traced call runs its program 4x")
    assert diff_stage(loop, scan, "denoise_loop").note == d.note  # either side
    assert diff_stage(scan, scan, "denoise_loop").note == "" and d.to_dict()["note"] == d.note
    text = format_diff(d)
    assert "note: python-loop's denoise_loop is a host loop" in text
    assert max(len(line) for line in text.splitlines()) <= WIDTH
