"""The config override reference: every field of every ``ltx2.PipelineConfig`` component a manifest
can set (``<component>.<field>``), its type, its value in each preset, the values it takes, and what
it does. The performance knobs are described in :data:`KNOB_DOCS`; the other fields are the
architecture of the reference model (diffusers / Gemma-3 names) and say so.
``tests/harness/docgen/test_knobs.py`` fails when ``ltx2`` gains a knob with no entry here."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.docgen.md import code, page, table
from harness.model import base_config, preset_names
from ltx2 import MESH_AXES, strategy_names

PRESET_COLUMNS = ("small", "ltx2_19b", "ltx2_3_22b")
_DTYPES = ("float32", "bfloat16")
_ATTENTION = ("auto", "xla", "blocked", "cudnn", "splash", "splash_ring", "splash_input")
_SHARDING_DOC = (
    "The sharding strategy of this component: one table of logical axis -> mesh axes (ltx2/sharding.py). "
    "`replicated`, `naive` (weights sharded on the contracted feature dim), `context` (sequence-parallel), "
    "`trillium` (2-D heads + embed), `ironwood` (1-D heads), ..."
)
_DTYPE_DOC = "The dtype of this component's activations."

# key -> (what it does, the values it takes; () where any value of its type).
KNOB_DOCS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "transformer.scan_layers": (
        "`lax.scan` over the stacked blocks (true) or a Python loop (false); one block function for both.",
        (True, False),
    ),
    "transformer.sharding": (_SHARDING_DOC, ()),
    "transformer.attention_impl": (
        "The attention kernel: `xla` (einsum + softmax), `blocked` (online-softmax tiles for CPU), `cudnn` (GPU, "
        "16-bit), `splash` (the Pallas TPU flash kernel), `splash_ring` (splash with sequence-sharded keys and "
        "values passed around the context ring), `splash_input` (the layer's input all-gathered instead of its "
        "keys and values), `auto` (cuDNN on GPU, blocked on CPU for large unsharded attention).",
        _ATTENTION,
    ),
    "transformer.attention_impl_min_tokens": (
        "attention_impl runs only the attentions whose queries and keys both reach this many tokens; shorter "
        "ones take the XLA path (MaxDiffusion's flash_min_seq_length). 1: every attention.",
        (),
    ),
    "transformer.dtype": ("The transformer's activation dtype.", _DTYPES),
    "transformer.param_dtype": ("The transformer's weight dtype.", _DTYPES),
    "transformer.linear_partials": (
        "Where projections round their products to a 16-bit dtype: `float32` once after the sum and bias (as "
        "diffusers); `activation` in the dot, so a sharded contraction all-reduces 16-bit partial sums (half the "
        "bytes). No effect in float32.",
        ("float32", "activation"),
    ),
    "transformer.rope_form": (
        "How a split RoPE is written: `concat` as diffusers (slices, concatenate) or `fused` (heads-major tables, "
        "one elementwise rotation); the same float32 arithmetic.",
        ("concat", "fused"),
    ),
    "transformer.qk_dtype": (
        "The dtype the attentions' Q/K norms return: `activation` as diffusers, or `float32` as MaxDiffusion's "
        "LTX-2 (queries and keys float32 through RoPE into the kernel, a sequence-parallel key gather float32).",
        ("activation", "float32"),
    ),
    "transformer.token_chunks": (
        "The video stream's per-token work after the self-attention's core runs on this many strided token "
        "chunks, so one chunk's output-projection all-reduce can run under another's matmuls. 1: all at once.",
        (),
    ),
    "transformer.pipeline_stages": (
        "Run the blocks as an interleaved pipeline over the mesh axes of the `layers` rule: stage s holds layers "
        "s, s + S, ...; the batch rows split into S microbatches (ltx2/pipeline_parallel.py). 1: no pipeline.",
        (),
    ),
    "connectors.scan_layers": ("`lax.scan` over the text connectors' blocks, or a Python loop.", (True, False)),
    "connectors.sharding": (_SHARDING_DOC, ()),
    "connectors.dtype": (_DTYPE_DOC, _DTYPES),
    "connectors.param_dtype": ("The connectors' weight dtype.", _DTYPES),
    "text_encoder.placement": (
        "Gemma-3 run through torchax inside JAX (`torchax`) or in PyTorch on the host.",
        ("torchax", "host"),
    ),
    "text_encoder.batching": (
        "Positive and negative prompt in one pass (`joint`) or two (`separate`).",
        ("joint", "separate"),
    ),
    "text_encoder.max_sequence_length": ("Prompt tokens the encoder pads to.", ()),
    "text_encoder.tokenizer_dir": ("A local Gemma-3 tokenizer directory, for text prompts (none: token ids).", ()),
    "text_encoder.sharding": (_SHARDING_DOC, ()),
    "video_vae.sharding": (_SHARDING_DOC + " Forced to replicated by pipeline.vae_replication.", ()),
    "video_vae.dtype": (_DTYPE_DOC, _DTYPES),
    "audio_vae.sharding": (_SHARDING_DOC + " Forced to replicated by pipeline.vae_replication.", ()),
    "audio_vae.dtype": (_DTYPE_DOC, _DTYPES),
    "vocoder.sharding": (_SHARDING_DOC + " Forced to replicated by pipeline.vae_replication.", ()),
    "vocoder.dtype": (_DTYPE_DOC, _DTYPES),
    "upsampler.sharding": (_SHARDING_DOC, ()),
    "upsampler.dtype": (_DTYPE_DOC, _DTYPES),
    "pipeline.num_inference_steps": ("Denoising steps of a whole generation.", ()),
    "pipeline.diffusion_loop": (
        "`scan`: the whole denoising loop one compiled program; `python`: a Python loop over one compiled step.",
        ("scan", "python"),
    ),
    "pipeline.guidance_batching": (
        "`batched`: one transformer forward over every guidance pass's rows (STG skip and modality isolation by "
        "per-row masks); `sequential`: one forward per pass, as diffusers.",
        ("batched", "sequential"),
    ),
    "pipeline.stg_fork": (
        "Perturbed (STG) rows join as copies of the conditional rows at the first perturbed block.",
        (True, False),
    ),
    "pipeline.text_kv_cache": (
        "Text keys/values of every cross-attention computed once per prompt row, outside the blocks.",
        (True, False),
    ),
    "pipeline.vae_replication": (
        "Replicate the VAEs and the vocoder on every device instead of laying them out by their own sharding.",
        (True, False),
    ),
    "pipeline.height": ("Video height in pixels (the manifest's workload.height sets the stages' size).", ()),
    "pipeline.width": ("Video width in pixels.", ()),
    "pipeline.num_frames": ("Video frames.", ()),
    "pipeline.frame_rate": ("Frames per second.", ()),
    "pipeline.spatio_temporal_guidance_blocks": ("The blocks STG perturbs (each < transformer.num_layers).", ()),
    "pipeline.use_cross_timestep": (
        "Cross-modal attention modulated by the other stream's timestep (diffusers' use_cross_timestep).",
        (True, False),
    ),
    "pipeline.decode_timestep": ("The VAE decoder's timestep conditioning (diffusers' decode_timestep).", ()),
    "pipeline.decode_noise_scale": (
        "Noise mixed into latents before decoding (diffusers' decode_noise_scale; none: decode_timestep).",
        (),
    ),
    "pipeline.seed": ("The random seed of the initial noise.", ()),
    **{
        f"guidance.{name}": (
            f"{what} (a traced value: changing it never recompiles).",
            (),
        )
        for name, what in (
            ("guidance_scale", "Video CFG scale"),
            ("stg_scale", "Video STG scale"),
            ("modality_scale", "Video modality-guidance scale"),
            ("guidance_rescale", "Video guidance rescale towards the conditional std (0: off)"),
            ("audio_guidance_scale", "Audio CFG scale"),
            ("audio_stg_scale", "Audio STG scale"),
            ("audio_modality_scale", "Audio modality-guidance scale"),
            ("audio_guidance_rescale", "Audio guidance rescale (0: off)"),
        )
    },
}


def knob_keys() -> list[str]:
    """Every ``<component>.<field>`` of the ``ltx2_19b`` preset's config (``upsampler`` included)."""
    cfg = base_config("ltx2_19b")
    out = []
    for f in dataclasses.fields(cfg):
        component = getattr(cfg, f.name)
        if dataclasses.is_dataclass(component):
            out += [f"{f.name}.{g.name}" for g in dataclasses.fields(component)]
    return out


def allowed_values(key: str) -> tuple[Any, ...]:
    if key.rsplit(".", 1)[-1] == "sharding":
        return tuple(strategy_names())
    return KNOB_DOCS.get(key, ("", ()))[1]


def _value(cfg: Any, key: str) -> str:
    obj = cfg
    for part in key.split("."):
        if obj is None or not hasattr(obj, part):
            return "—"
        obj = getattr(obj, part)
    return code(repr(obj))


def _type(cfg: Any, key: str) -> str:
    component, field = key.split(".", 1)
    hints = {f.name: f.type for f in dataclasses.fields(getattr(cfg, component))}
    return str(hints[field]).replace("|", " or ")


def _knob(cfg: dict[str, Any], key: str) -> str:
    doc, _ = KNOB_DOCS[key]
    big = cfg["ltx2_19b"]
    facts = [f"*{_type(big, key)}*", *(f"{p} {_value(cfg[p], key)}" for p in PRESET_COLUMNS)]
    values = allowed_values(key)
    if values:
        facts.append("one of " + ", ".join(code(repr(v)) for v in values))
    return f"### `{key}`\n\n" + " · ".join(facts) + f"\n\n{doc}\n"


def render() -> str:
    configs = {p: base_config(p) for p in preset_names()}
    big = configs["ltx2_19b"]
    knobs = [_knob(configs, k) for k in knob_keys() if k in KNOB_DOCS]
    arch = []
    for key in knob_keys():
        if key not in KNOB_DOCS:
            cls = type(getattr(big, key.split(".")[0])).__name__
            row = [code(key), _type(big, key), *(_value(configs[p], key) for p in PRESET_COLUMNS)]
            arch.append([*row, f"`{cls}`"])
    presets = [code(p) for p in PRESET_COLUMNS]
    rules = (
        "## Sharding rules\n\n`sharding.rules.<logical axis>` = a list of mesh axes (`[]`: replicated) or one axis "
        "name replaces one rule of the transformer's strategy; the rules derive a strategy named after them "
        "(`naive+mlp=tensor+mlp_in=-`). Mesh axes: " + ", ".join(code(a) for a in MESH_AXES) + ". "
        "[Layouts and kernels](../layouts.md) explains the logical names.\n\n"
        '```toml\n[[variants]]\nname = "naive-ffn-fixed"\n[variants.overrides]\n'
        '"transformer.sharding" = "naive"\n"sharding.rules.mlp_in" = []\n"sharding.rules.mlp" = ["tensor"]\n```\n'
    )
    intro = (
        "Any field of `ltx2.PipelineConfig` is a manifest override, `<component>.<field>`, in `[model] overrides`, "
        "a variant's `overrides` or a `[matrix]` axis. Overrides change the variant id and the compile-cache key; "
        "an unknown key or a value the component refuses is an error naming the file, line and key. Each entry "
        "gives the value each preset starts from (names as in `ltx2.PRESETS`)."
    )
    return page(
        "Config overrides",
        "harness/docgen/knobs.py, ltx2.PipelineConfig",
        intro,
        "## Performance knobs and run-time choices\n\n" + "\n".join(knobs),
        rules,
        "## Reference-model fields\n\nThe architecture and schedule of the model as its reference (diffusers, "
        "Gemma-3) names them: changing one is a different model or sampler, not a performance knob.\n\n"
        + table(["key", "type", *presets, "config"], arch),
    )
