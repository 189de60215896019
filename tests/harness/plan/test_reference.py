"""A manifest's ``[reference]`` table (:mod:`harness.plan.reference`): published numbers per rung
with their source; every mistake is one located error (file, key, line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.expansion import load_sweep
from harness.model import build_config
from harness.plan.manifest import ManifestError, load_manifest
from tests.harness.plan.manifest_cases import BASE

MAXDIFFUSION = Path(__file__).parents[3] / "experiments" / "maxdiffusion-v7x.toml"
VARIANTS = '[[variants]]\nname = "a"\n[[variants]]\nname = "b"\n'
GOOD = '[reference]\nsource = "https://example.org/pr/1"\nhardware = "TPU v7x-8"\n'


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "m.toml"
    path.write_text(BASE + VARIANTS + text)
    return load_manifest(path)


def test_reference_table_is_parsed(tmp_path: Path) -> None:
    m = _load(tmp_path, GOOD + "[reference.rungs.a]\nall_gather_wasted_fraction = 0.5\nvideo_s = 20\nnote = 'x'\n")
    ref = m.reference  # type: ignore[attr-defined]
    assert (ref.source, ref.hardware, ref.diffusion_stage) == ("https://example.org/pr/1", "TPU v7x-8", "denoise_loop")
    (rung,) = ref.rungs
    assert (rung.variant, rung.get("video_s"), rung.get("all_gather_wasted_fraction"), rung.note) == (
        "a",
        20.0,
        0.5,
        "x",
    )
    assert rung.get("diffusion_s") is None
    assert ref.to_dict()["rungs"] == [
        {"variant": "a", "values": {"all_gather_wasted_fraction": 0.5, "video_s": 20.0}, "note": "x"}
    ]


@pytest.mark.parametrize(
    ("text", "key", "line", "reason"),
    [
        (
            GOOD + "[reference.rungs.c]\nvideo_s = 1\n",
            "reference.rungs.c",
            None,
            "names no variant of this manifest (variants: a, b)",
        ),
        (
            GOOD + "[reference.rungs.a]\nall_gather_wasted_fraction = 52.56\n",
            "reference.rungs.a.all_gather_wasted_fraction",
            20,
            "a fraction in [0, 1], got 52.56 (write 52.56% as 0.5256)",
        ),
        (
            GOOD + "[reference.rungs.a]\nvideo_s = -1\n",
            "reference.rungs.a.video_s",
            20,
            "seconds must be >= 0, got -1.0",
        ),
        (
            GOOD + "[reference.rungs.a]\nnote = 'x'\n",
            "reference.rungs.a",
            19,
            "states no number: give at least one of all_gather_wasted_fraction, video_s, diffusion_s, text_encode_s",
        ),
        (
            '[reference]\nhardware = "x"\n[reference.rungs.a]\nvideo_s = 1\n',
            "reference.source",
            None,
            "missing required key",
        ),
        (GOOD + "[reference.rungs]\n", "reference.rungs", 19, "needs at least one rung"),
    ],
    ids=["unknown-variant", "percent-not-fraction", "negative-seconds", "no-number", "no-source", "no-rungs"],
)
def test_bad_reference_is_one_located_error(tmp_path: Path, text: str, key: str, line: int | None, reason: str) -> None:
    with pytest.raises(ManifestError) as info:
        _load(tmp_path, text)
    assert (info.value.key, info.value.reason) == (key, reason)
    if line is not None:
        assert info.value.line == line


def test_unknown_rung_key_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        _load(tmp_path, GOOD + "[reference.rungs.a]\nvideo_seconds = 1\n")
    assert info.value.key == "reference.rungs.a.video_seconds"


def test_maxdiffusion_manifest_is_their_ladder() -> None:
    """Their rungs in #385's order, each a fix on the one before, on their mesh, with their numbers."""
    sweep = load_sweep(MAXDIFFUSION)
    names = [v.name for v in sweep.variants]
    assert names == ["before-385", "ffn-fixed", "qkv-fixed", "text-batched", "scanned-loop"]
    assert [v.reference for v in sweep.variants[1:]] == names[:-1]
    assert {v.target.mesh for v in sweep.variants} == {(("data", 2), ("context", 4))}
    configs = [build_config(v.preset, v.config_overrides) for v in sweep.variants]
    heads = "activation_attention_heads=-"  # sequence-parallel, as their pyconfig orders the rules
    ffn, qkv = f"naive+{heads}+mlp_in=-+mlp_out=-", f"naive+{heads}+attn_out=-+mlp_in=-+mlp_out=-+qkv_in=-"
    assert [c.transformer.sharding for c in configs] == [f"naive+{heads}", ffn, *[qkv] * 3]
    assert {(c.transformer.attention_impl, c.transformer.attention_impl_min_tokens) for c in configs} == {
        ("splash", 4096)
    }
    assert [c.text_encoder.batching for c in configs] == ["separate"] * 3 + ["joint"] * 2
    assert [c.pipeline.diffusion_loop for c in configs] == ["python"] * 4 + ["scan"]
    assert {c.guidance.passes() for c in configs} == {(True, False, False)}  # CFG only
    ref = sweep.manifest.reference
    assert ref is not None and ref.source.endswith("maxdiffusion/pull/385")
    assert [r.variant for r in ref.rungs] == names
    assert [r.get("all_gather_wasted_fraction") for r in ref.rungs] == [0.5256, 0.3807, 0.1939, None, None]
    assert [r.get("video_s") for r in ref.rungs] == [20.01, 16.7, 13.84, 13.38, 12.5]
    assert [r.get("diffusion_s") for r in ref.rungs] == [None, None, None, 7.84, 7.28]


def test_tpu_gate_runs_maxdiffusions_last_rung() -> None:
    """The TPU gate's MaxDiffusion variant is the ladder's scanned-loop program: the same model config
    (their sequence-parallel kernel included), slice, mesh, compiler options and workload."""
    ladder = {v.name: v for v in load_sweep(MAXDIFFUSION).variants}["scanned-loop"]
    gate = {v.name: v for v in load_sweep(MAXDIFFUSION.parent / "nightly-tpu.toml").variants}
    ours = gate["v7x-maxdiffusion-scanned-loop"]
    built = [build_config(v.preset, v.config_overrides) for v in (ladder, ours)]
    assert (
        built[0].transformer == built[1].transformer and "activation_attention_heads=-" in built[1].transformer.sharding
    )
    assert (built[0].pipeline, built[0].guidance) == (built[1].pipeline, built[1].guidance)
    for field in ("topology", "mesh", "compiler_options", "platform"):
        assert getattr(ours.target, field) == getattr(ladder.target, field), field
    for field in ("height", "width", "num_frames", "frame_rate", "batch", "steps", "text_tokens"):
        assert getattr(ours.workload, field) == getattr(ladder.workload, field), field
