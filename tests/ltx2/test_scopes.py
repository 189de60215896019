"""Named scopes: they reach the compiled program's metadata, and change nothing else.

Programs are traced twice, with scopes and with :func:`ltx2.scopes.disabled`; the optimized HLO
with its metadata (``metadata={...}`` and the stack-frame tables) removed must be identical: the
same program computes the same numbers. Stages are the tiny preset's, on 8 simulated devices; the
step under ``context`` (sequence-sharded activations: collectives in the program).
"""

from __future__ import annotations

import re

import jax
import pytest

from harness.metrics.hlo.text import without_provenance
from ltx2 import PipelineConfig, Workload, build_mesh, build_stage, scopes

WL = Workload(height=64, width=64, num_frames=65, frame_rate=24.0, batch=2, steps=2, text_tokens=16)


def _compiled(stage: str, cfg: PipelineConfig, mesh: jax.sharding.Mesh) -> str:
    program = build_stage(stage, cfg, WL, mesh)
    with jax.set_mesh(mesh):
        return program.fn.lower(*program.abstract_args).compile().as_text()


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return build_mesh({"fsdp": 2, "context": 2, "tensor": 2}, devices=jax.devices()[:8])


@pytest.mark.parametrize(("stage", "sharding"), [("denoise_step", "context"), ("audio_decode", "replicated")])
def test_scopes_change_only_metadata(stage: str, sharding: str, mesh: jax.sharding.Mesh) -> None:
    tiny = PipelineConfig.tiny()
    cfg = tiny.replace(transformer=tiny.transformer.replace(sharding=sharding))
    scoped_hlo = _compiled(stage, cfg, mesh)
    with scopes.disabled():
        plain_hlo = _compiled(stage, cfg, mesh)
    assert "/block/" in scoped_hlo or "/audio_vae/" in scoped_hlo
    assert "/block/" not in plain_hlo and "/audio_vae/" not in plain_hlo
    assert "all-gather" in scoped_hlo or stage != "denoise_step"  # a sharded program, collectives included
    assert without_provenance(scoped_hlo) == without_provenance(plain_hlo)


def test_every_part_of_the_step_is_scoped(mesh: jax.sharding.Mesh) -> None:
    """The scope paths in the bare step's optimized HLO: each part of a block, down to q/k/v."""
    hlo = _compiled("denoise_step", PipelineConfig.tiny(), mesh)
    paths = {scopes.scope_path(m) for m in re.findall(r'op_name="([^"]*)"', hlo)}
    for expected in [
        ("transformer", "block", "attn1", "qkv"),
        ("transformer", "block", "attn1", "core"),
        ("transformer", "block", "attn1", "out"),
        ("transformer", "block", "audio_attn2", "qkv"),
        ("transformer", "block", "a2v", "core"),
        ("transformer", "block", "v2a", "out"),
        ("transformer", "block", "ff", "proj_in"),
        ("transformer", "block", "audio_ff", "proj_out"),
        ("transformer", "embed"),
        ("transformer", "timestep"),
        ("transformer", "output"),
        ("transformer", "rope"),
        ("scheduler",),
    ]:
        assert expected in paths, sorted(paths)


def test_scope_path_keeps_only_table_names() -> None:
    assert scopes.scope_path("jit(step)/while/body/closed_call/transformer/block/ff/proj_in/dot_general") == (
        "transformer",
        "block",
        "ff",
        "proj_in",
    )
    assert scopes.scope_path("jit(decode)/audio_vae/up.2/conv/conv_general_dilated") == ("audio_vae", "up.2")
    assert scopes.scope_path("jit(f)/while/body/add") == ()
    # an op XLA combined from several: the scopes its parts share
    combined = "jit(step)/transformer/while/body/closed_call/block/(a2v/qkv/dot_general:audio_attn1/qkv/dot_general)"
    assert scopes.scope_path(combined) == ("transformer", "block")
    assert scopes.scope_path("jit(s)/block/(ff/proj_in/dot:ff/proj_out/dot)") == ("block", "ff")
    assert scopes.scope_path("jit(s)/block/(ff/(proj_in/a:proj_in/b):ff/proj_in/c)") == ("block", "ff", "proj_in")
    assert all(" " not in name and "/" not in name for name in scopes.SCOPES)
