"""The end-to-end pipeline's bfloat16 error, stage by stage (issue 45).

Each stage of ``tests/ltx2/test_bf16_pipeline.py``'s pipeline is run alone in bfloat16 on both sides
from the *same* float32 intermediate (diffusers' float32 run's, captured), and measured as the
components are (``tests/accuracy.py``) against diffusers' float32 output of that stage:

* ``text``: the connectors, from the prompt embeddings (their video and audio outputs);
* ``denoise``: the guided loop (2 steps, CFG + STG + modality guidance and rescale), from the float32
  connector outputs and the initial latents, to the final normalised latents (video, audio);
* ``video decode``: from the float32 final latents: the pipeline's rounding of the normalised
  latents, denormalisation, the video VAE and the ``[0, 1]`` frames;
* ``audio decode``: the audio VAE and the vocoder from the float32 final (denormalised) latents.

Where diffusers rounds at a stage boundary (its video latents go to bfloat16 before they are
denormalised) the stage includes it; ours takes the same float32 input as it takes it in the
pipeline. Weights are diffusers' rounded to bfloat16 (float32 storage) for every side.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock

import numpy as np

from tests.accuracy import Comparison, Deviation, compare, deviation
from tests.ltx2 import test_bf16_pipeline as tbp

OUTPUTS = ("text video", "text audio", "denoise video", "denoise audio", "video decode", "audio decode")


@contextlib.contextmanager
def _capturing(pipe: Any, into: dict[str, Any], connectors_out: tuple | None = None) -> Iterator[None]:
    """Record the connectors' inputs and outputs, the final normalised video latents
    (``_unpack_latents``), the final packed normalised and the unpacked denormalised audio latents;
    with ``connectors_out`` the connectors return those tensors (cast to the prompt's dtype) instead."""
    import torch

    forward = pipe.connectors.forward

    def connectors(*args: Any, **kw: Any) -> Any:
        into["connectors_in"] = (args, kw)
        if connectors_out is not None:
            dtype = args[0].dtype
            return tuple(t.to(dtype) if torch.is_floating_point(t) else t for t in connectors_out)
        out = forward(*args, **kw)
        into["connectors_out"] = tuple(t.detach().clone() for t in out)
        return out

    def recorder(name: str, fn: Any, arg: bool) -> Any:
        def wrapped(*args: Any, **kw: Any) -> Any:
            out = fn(*args, **kw)
            into[name] = (args[0] if arg else out).detach().float().clone()
            return out

        return wrapped

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(pipe.connectors, "forward", connectors))
        for name, attr, arg in (
            ("video_latents", "_unpack_latents", False),
            ("audio_packed", "_denormalize_audio_latents", True),
            ("audio_latents", "_unpack_audio_latents", False),
        ):
            stack.enter_context(mock.patch.object(pipe, attr, recorder(name, getattr(pipe, attr), arg)))
        yield


def _np(t: Any) -> np.ndarray:
    return t.detach().float().numpy()


@functools.cache
def _float32(seed: int) -> dict[str, Any]:
    """diffusers' float32 run of one seed with its intermediates (a fresh pipeline of the seed: the
    cached one's weights are rounded)."""
    from ltx2.pipeline_config import PipelineConfig
    from tests.ltx2 import test_pipeline as tp

    cfg = PipelineConfig.tiny()
    _, x, ref, _ = tbp._reference(seed)
    got: dict[str, Any] = {}
    pipe = tp.diffusers_pipeline(cfg, seed)
    with _capturing(pipe, got):
        out = tbp._theirs(pipe, cfg, x, bf16=False)
    np.testing.assert_array_equal(out["video"], ref["video"])  # the capture changes nothing
    return got


def _theirs_stages(seed: int) -> dict[str, np.ndarray]:
    """diffusers in bfloat16, one stage at a time from the float32 intermediates."""
    import torch

    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig.tiny()
    pipe, x, _, _ = tbp._reference(seed)
    f32 = _float32(seed)
    bf = torch.bfloat16
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        (args, kw) = f32["connectors_in"]
        conn = pipe.connectors.to(bf)
        video, audio, _ = conn(args[0].to(bf), *args[1:], **kw)
        pipe.connectors.float()
        out["text video"], out["text audio"] = _np(video), _np(audio)

        pipe.transformer.to(bf)
        got: dict[str, Any] = {}
        with _capturing(pipe, got, connectors_out=f32["connectors_out"]):
            pipe_x = dict(x)
            tbp._call(pipe, cfg, pipe_x, bf16=True, output_type="latent")  # to the final latents
        pipe.transformer.float()
        out["denoise video"], out["denoise audio"] = _np(got["video_latents"]), _np(got["audio_packed"])

        vae = pipe.vae.to(bf)
        assert not vae.config.timestep_conditioning, "the tiny VAE draws no decode noise"
        lat = f32["video_latents"].to(bf)
        lat = pipe._denormalize_latents(lat, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)
        frames = vae.decode(lat.to(bf), None, return_dict=False)[0]
        out["video decode"] = np.asarray(pipe.video_processor.postprocess_video(frames, output_type="np"), np.float32)
        pipe.vae.float()

        pipe.audio_vae.to(bf), pipe.vocoder.to(bf)
        mel = pipe.audio_vae.decode(f32["audio_latents"].to(bf), return_dict=False)[0]
        out["audio decode"] = _np(pipe.vocoder(mel))
        pipe.audio_vae.float(), pipe.vocoder.float()
    return out


def _ours_stages(seed: int) -> dict[str, np.ndarray]:
    """Ours in bfloat16 (``tbp._ours``'s pipeline), one stage at a time from diffusers' float32
    intermediates."""
    import jax.numpy as jnp

    from ltx2.latents import TextEmbeddings, pack_video, unpack_video

    pipe, x, _, _ = tbp._reference(seed)
    f32 = _float32(seed)
    ours = tbp._pipeline(pipe, tbp.KNOBS["default"])
    plan = ours.plan()
    out: dict[str, np.ndarray] = {}
    text = ours.embed_text(x["pos"], x["pos_mask"], x["neg"], x["neg_mask"])
    out["text video"], out["text audio"] = np.asarray(text.video, np.float32), np.asarray(text.audio, np.float32)

    video, audio = (jnp.asarray(_np(t), text.video.dtype) for t in f32["connectors_out"][:2])
    x0 = ours.prepare_latents(plan, video=x["video"], audio=x["audio"])
    given = TextEmbeddings(video, audio, text.mask)
    lat = ours.denoise(x0, given, ours.schedule(plan), ours.scales(), plan, loop="scan")
    p, pt = plan.patch_size, plan.patch_size_t
    grid = (plan.frames // pt, plan.height // p, plan.width // p, p, pt)
    out["denoise video"] = np.asarray(unpack_video(lat.video, *grid), np.float32)
    out["denoise audio"] = np.asarray(lat.audio, np.float32)

    packed = pack_video(jnp.asarray(_np(f32["video_latents"])), p, pt)
    out["video decode"] = np.asarray(ours.decode_video(packed, plan), np.float32)
    out["audio decode"] = np.asarray(ours.decode_audio(jnp.asarray(_np(f32["audio_packed"])), plan), np.float32)
    return out


def measure_stages(seeds: Sequence[int]) -> list[Comparison]:
    """Per stage output, ours and diffusers' bfloat16 deviations from diffusers' float32 stage output."""
    ours: dict[str, list[Deviation]] = {k: [] for k in OUTPUTS}
    theirs: dict[str, list[Deviation]] = {k: [] for k in OUTPUTS}
    for seed in seeds:
        f32 = _float32(seed)
        _, _, ref_out, _ = tbp._reference(seed)
        ref = {
            "text video": _np(f32["connectors_out"][0]),
            "text audio": _np(f32["connectors_out"][1]),
            "denoise video": _np(f32["video_latents"]),
            "denoise audio": _np(f32["audio_packed"]),
            "video decode": ref_out["video"],
            "audio decode": ref_out["audio"],
        }
        mine, their = _ours_stages(seed), _theirs_stages(seed)
        for k in OUTPUTS:
            ours[k].append(deviation(mine[k], ref[k]))
            theirs[k].append(deviation(their[k], ref[k]))
    return [compare(f"stage {k}", ours[k], theirs[k]) for k in OUTPUTS]


if __name__ == "__main__":  # python -m tests.ltx2.bf16_stages FIRST END: every stage, then end to end
    import sys

    from tests.accuracy import METRICS

    seeds = range(int(sys.argv[1]), int(sys.argv[2]))
    for c in [*measure_stages(seeds), *tbp.measure_pipeline("default", seeds)]:
        for m in METRICS:
            print(c.line(m))
