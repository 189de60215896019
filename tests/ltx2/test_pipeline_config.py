"""PipelineConfig: presets build and agree with the component presets; links between
components and option values are validated with messages naming the fields."""

from __future__ import annotations

import dataclasses

import pytest

from ltx2.config import TransformerConfig
from ltx2.pipeline_config import PRESETS, GemmaConfig, PipelineConfig, PipelineOptions

FIELDS = [
    "transformer",
    "connectors",
    "text_encoder",
    "gemma",
    "video_vae",
    "audio_vae",
    "vocoder",
    "upsampler",
    "scheduler",
    "guidance",
    "pipeline",
]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_are_consistent(name: str) -> None:
    cfg = PipelineConfig.preset(name)
    assert [f.name for f in dataclasses.fields(cfg)] == FIELDS
    assert cfg.transformer.in_channels == cfg.video_vae.latent_channels
    assert cfg.transformer.audio_in_channels == cfg.audio_vae.packed_latent_channels
    assert cfg.connectors.text_proj_in_factor == cfg.gemma.num_hidden_layers + 1
    assert cfg.gemma.to_transformers().hidden_size == cfg.connectors.caption_channels


def test_transformer_presets_are_the_component_presets() -> None:
    # STG is on (perturbed_attn) so the STG pass does something; it adds no parameters.
    assert PipelineConfig.tiny().transformer == TransformerConfig.tiny(perturbed_attn=True)
    assert PipelineConfig.small().transformer == TransformerConfig.small(perturbed_attn=True)
    assert PipelineConfig.ltx2_19b().transformer == TransformerConfig.ltx2_19b()
    assert PipelineConfig.ltx2_3_22b().transformer == TransformerConfig.ltx2_3_22b()
    assert PipelineConfig.preset("ltx2.3-22b") == PipelineConfig.ltx2_3_22b()


def test_broken_links_name_both_fields() -> None:
    cfg = PipelineConfig.tiny()
    with pytest.raises(ValueError, match=r"transformer.in_channels=16 must equal video_latent_tokens_width=8"):
        cfg.replace(transformer=cfg.transformer.replace(in_channels=16, out_channels=16))
    with pytest.raises(ValueError, match=r"connectors.caption_channels=24 must equal gemma.hidden_size=32"):
        cfg.replace(gemma=cfg.gemma.replace(hidden_size=32))
    with pytest.raises(ValueError, match=r"spatio_temporal_guidance_blocks=\(5,\).*num_layers=2"):
        cfg.replace(pipeline=cfg.pipeline.replace(spatio_temporal_guidance_blocks=(5,)))
    with pytest.raises(ValueError, match=r"max_sequence_length=12 must be a multiple"):
        cfg.replace(text_encoder=dataclasses.replace(cfg.text_encoder, max_sequence_length=12))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(diffusion_loop="while"), r"pipeline.diffusion_loop='while': must be one of \('scan', 'python'\)"),
        (dict(num_inference_steps=0), r"pipeline.num_inference_steps=0: must be a positive integer"),
        (dict(vae_replication=1), r"pipeline.vae_replication=1: must be a bool"),
        (dict(guidance_batching="joint"), r"guidance_batching='joint': must be one of \('batched', 'sequential'\)"),
        (dict(stg_fork="yes"), r"pipeline.stg_fork='yes': must be a bool"),
        (dict(text_kv_cache=0), r"pipeline.text_kv_cache=0: must be a bool"),
        (dict(frame_rate=-1.0), r"pipeline.frame_rate=-1.0"),
        (dict(decode_timestep=2.0), r"pipeline.decode_timestep=2.0"),
    ],
)
def test_options_validate(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PipelineOptions(**change)
    with pytest.raises(ValueError, match=r"GemmaConfig.num_key_value_heads=3"):
        GemmaConfig.tiny().replace(num_key_value_heads=3)


def test_unknown_preset() -> None:
    with pytest.raises(ValueError, match=r"unknown pipeline preset 'huge'"):
        PipelineConfig.preset("huge")


def test_medium_is_small_with_the_wide_transformer() -> None:
    small, medium = PipelineConfig.small(), PipelineConfig.medium()
    assert medium.transformer == TransformerConfig.medium(perturbed_attn=True)
    assert (medium.connectors.caption_channels, medium.gemma.hidden_size) == (1024, 1024)
    assert (medium.video_vae, medium.audio_vae, medium.vocoder, medium.pipeline) == (
        small.video_vae,
        small.audio_vae,
        small.vocoder,
        small.pipeline,
    )
    assert PRESETS.index("medium") == PRESETS.index("small") + 1
