"""A variant's config: the preset's PipelineConfig with dotted overrides applied and checked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.model import base_config, build_config, check_override, components, config_dict, model_workload
from harness.plan.manifest import Workload
from ltx2 import PipelineConfig
from ltx2 import Workload as ModelWorkload


def test_overrides_replace_single_fields() -> None:
    cfg = build_config("tiny", {"pipeline.diffusion_loop": "python", "transformer.sharding": "context"})
    assert isinstance(cfg, PipelineConfig)
    assert cfg.pipeline.diffusion_loop == "python" and cfg.transformer.sharding == "context"
    assert cfg.replace(
        pipeline=base_config("tiny").pipeline, transformer=base_config("tiny").transformer
    ) == base_config("tiny")  # nothing else changed
    assert base_config("tiny") is base_config("tiny")  # built once per process
    assert set(components(base_config("tiny"))) >= {
        "transformer",
        "video_vae",
        "audio_vae",
        "vocoder",
        "pipeline",
        "text_encoder",
        "connectors",
        "scheduler",
        "guidance",
    }


def test_values_are_normalised_to_the_field_type() -> None:
    assert check_override("tiny", "pipeline.frame_rate", 25) == 25.0
    assert isinstance(check_override("tiny", "pipeline.frame_rate", 25), float)
    assert check_override("tiny", "pipeline.spatio_temporal_guidance_blocks", [0, 1]) == [0, 1]
    assert check_override("test:ok", "test.anything", {"x": 1}) == {"x": 1}
    with pytest.raises(KeyError, match="test presets take only test.\\* keys, got 'transformer.dtype'"):
        check_override("test:ok", "transformer.dtype", "float32")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"transformer.in_channels": 64}, "transformer.in_channels=64 must equal"),
        ({"pipeline.diffusion_loop": "while"}, "diffusion_loop"),
        ({"video_vae.sharding": "nope"}, "unknown sharding strategy 'nope'"),
        ({"pipeline.no_such_field": 1}, "PipelineOptions has no field 'no_such_field'"),
        ({"transformer.num_layers": 2.5}, "expected int, got float"),
    ],
)
def test_bad_overrides_name_the_key(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, KeyError, TypeError), match=message):
        build_config("tiny", overrides)


def test_the_record_gets_plain_json() -> None:
    resolved = config_dict(build_config("small", {"transformer.dtype": "bfloat16"}))
    assert resolved["transformer"]["dtype"] == "bfloat16" and resolved["pipeline"]["num_inference_steps"] == 8
    assert json.loads(json.dumps(resolved)) == resolved


def test_the_model_gets_the_workload_size() -> None:
    wl = Workload(
        height=64,
        width=96,
        num_frames=9,
        frame_rate=25.0,
        batch=2,
        steps=3,
        text_tokens=16,
        stages=("denoise_step", "video_decode"),
    )
    assert model_workload(wl) == ModelWorkload(64, 96, 9, 25.0, 2, 3, 16)
