"""The whole LTX-2 pipeline's configuration: one frozen dataclass of component configs.

Field names of :class:`PipelineConfig` are the override prefixes manifests use
(``transformer.sharding``, ``video_vae.dtype``, ``pipeline.diffusion_loop``,
``text_encoder.batching`` ...). Presets (``tiny``, ``small``, ``medium``, ``ltx2_19b``, ``ltx2_3_22b``)
keep every component consistent with its neighbours: latent channels, scale factors, caption
and connector widths, Gemma hidden size and layer count. ``__post_init__`` checks those links
and names both ends when one breaks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ltx2.config import TransformerConfig
from ltx2.guidance import GuidanceConfig
from ltx2.scheduler import SchedulerConfig
from ltx2.sharding import register_overrides
from ltx2.text.connectors import ConnectorsConfig
from ltx2.text.gemma import TextEncoderConfig
from ltx2.vae.audio import LATENT_DOWNSAMPLE_FACTOR, AudioVAEConfig
from ltx2.vae.upsampler import LatentUpsamplerConfig
from ltx2.vae.video import VideoVAEConfig
from ltx2.vae.vocoder import VocoderConfig, VocoderWithBWEConfig

DiffusionLoop = Literal["scan", "python"]
DIFFUSION_LOOPS = ("scan", "python")
GUIDANCE_BATCHINGS = ("batched", "sequential")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class GemmaConfig:
    """Gemma-3 text-model sizes (transformers ``Gemma3TextConfig`` names), used to build a
    randomly initialised encoder for presets; a loaded checkpoint brings its own config."""

    vocab_size: int = 262208
    hidden_size: int = 3840
    intermediate_size: int = 15360
    num_hidden_layers: int = 48
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 256
    query_pre_attn_scalar: int = 256
    sliding_window: int = 1024
    sliding_window_pattern: int = 6  # every 6th layer attends globally
    max_position_embeddings: int = 131072

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if not _positive_int(getattr(self, f.name)):
                raise ValueError(f"GemmaConfig.{f.name}={getattr(self, f.name)!r}: must be a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"GemmaConfig.num_key_value_heads={self.num_key_value_heads!r}: must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )

    @property
    def num_hidden_states(self) -> int:
        """L + 1: the embeddings and every layer's output (the connectors' ``text_proj_in_factor``)."""
        return self.num_hidden_layers + 1

    @property
    def layer_types(self) -> list[str]:
        p = self.sliding_window_pattern
        return ["full_attention" if (i + 1) % p == 0 else "sliding_attention" for i in range(self.num_hidden_layers)]

    def to_transformers(self) -> Any:
        """The transformers ``Gemma3TextConfig`` (imports transformers)."""
        from transformers import Gemma3TextConfig

        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sliding_window_pattern"}
        return Gemma3TextConfig(**kwargs, layer_types=self.layer_types)

    @classmethod
    def tiny(cls) -> GemmaConfig:
        """Hidden 24 (= tiny caption channels), 2 layers (3 hidden states), alternating attention."""
        return cls(
            vocab_size=128,
            hidden_size=24,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=12,
            query_pre_attn_scalar=12,
            sliding_window=4,
            sliding_window_pattern=2,
            max_position_embeddings=256,
        )

    @classmethod
    def small(cls) -> GemmaConfig:
        """Hidden 128 (= small caption channels), 4 layers (5 hidden states)."""
        return cls(
            vocab_size=1024,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=32,
            query_pre_attn_scalar=32,
            sliding_window=64,
            sliding_window_pattern=2,
            max_position_embeddings=1024,
        )

    @classmethod
    def gemma3_12b(cls) -> GemmaConfig:
        """Gemma-3-12B (LTX-2.0 and 2.3's encoder): the class defaults."""
        return cls()

    def replace(self, **changes: Any) -> GemmaConfig:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class PipelineOptions:
    """Run-time choices of :class:`ltx2.pipeline.LTX2Pipeline` (diffusers ``__call__`` names).

    ``diffusion_loop``: ``scan`` (the whole loop one compiled program) or ``python`` (a Python
    loop over one compiled step). ``vae_replication``: replicate the video/audio VAEs and the
    vocoder on every device (their configs' ``sharding`` is forced to ``replicated``) instead of
    laying them out by their own ``sharding`` field. Text-encoder batching and placement are
    ``text_encoder.batching`` / ``text_encoder.placement`` (:class:`TextEncoderConfig`).

    The guided step (:mod:`ltx2.passes`): ``guidance_batching`` ``batched`` runs every guidance
    pass of a step (uncond, cond, isolated, perturbed rows) as one transformer forward with
    per-row masks, ``sequential`` one forward per pass as diffusers does. ``stg_fork``: the
    perturbed (STG) rows equal the conditional ones up to the first perturbed block, so they are
    computed once and forked there (with no effective perturbation, ``perturbed_attn`` off, the
    conditional prediction is reused). ``text_kv_cache``: text keys/values of every
    cross-attention computed once per prompt row and shared by the rows that read it: once per
    video, or, where the text modulation follows the timestep (LTX-2.3 prompt AdaLN), in each
    block of each step for the rows of that forward (batched passes share, sequential ones cannot)."""

    num_inference_steps: int = 30
    diffusion_loop: str = "scan"
    guidance_batching: str = "batched"
    stg_fork: bool = True
    text_kv_cache: bool = True
    vae_replication: bool = True
    height: int = 512
    width: int = 768
    num_frames: int = 121
    frame_rate: float = 24.0
    spatio_temporal_guidance_blocks: tuple[int, ...] = (28,)
    use_cross_timestep: bool = True
    decode_timestep: float = 0.0
    decode_noise_scale: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "spatio_temporal_guidance_blocks", tuple(self.spatio_temporal_guidance_blocks))
        for name in ("num_inference_steps", "height", "width", "num_frames"):
            if not _positive_int(getattr(self, name)):
                raise _fail("pipeline", name, getattr(self, name), "must be a positive integer")
        if self.diffusion_loop not in DIFFUSION_LOOPS:
            raise _fail("pipeline", "diffusion_loop", self.diffusion_loop, f"must be one of {DIFFUSION_LOOPS}")
        if self.guidance_batching not in GUIDANCE_BATCHINGS:
            raise _fail("pipeline", "guidance_batching", self.guidance_batching, f"must be one of {GUIDANCE_BATCHINGS}")
        for name in ("vae_replication", "use_cross_timestep", "stg_fork", "text_kv_cache"):
            if not isinstance(getattr(self, name), bool):
                raise _fail("pipeline", name, getattr(self, name), "must be a bool")
        if isinstance(self.frame_rate, bool) or not isinstance(self.frame_rate, int | float) or self.frame_rate <= 0:
            raise _fail("pipeline", "frame_rate", self.frame_rate, "must be a positive number")
        if any(not isinstance(b, int) or isinstance(b, bool) or b < 0 for b in self.spatio_temporal_guidance_blocks):
            raise _fail(
                "pipeline",
                "spatio_temporal_guidance_blocks",
                self.spatio_temporal_guidance_blocks,
                "must be non-negative block indices",
            )
        if not 0.0 <= self.decode_timestep <= 1.0:
            raise _fail("pipeline", "decode_timestep", self.decode_timestep, "must be in [0, 1]")
        if self.decode_noise_scale is not None and not 0.0 <= self.decode_noise_scale <= 1.0:
            raise _fail("pipeline", "decode_noise_scale", self.decode_noise_scale, "must be None or in [0, 1]")

    def replace(self, **changes: Any) -> PipelineOptions:
        return dataclasses.replace(self, **changes)


def _fail(component: str, field: str, value: Any, reason: str) -> ValueError:
    return ValueError(f"{component}.{field}={value!r}: {reason}")


Vocoder = VocoderConfig | VocoderWithBWEConfig


@dataclass(frozen=True)
class PipelineConfig:
    """Every component of ``LTX2Pipeline`` plus :class:`PipelineOptions` (``pipeline``)."""

    transformer: TransformerConfig
    connectors: ConnectorsConfig
    text_encoder: TextEncoderConfig
    gemma: GemmaConfig
    video_vae: VideoVAEConfig
    audio_vae: AudioVAEConfig
    vocoder: Vocoder
    upsampler: LatentUpsamplerConfig | None
    scheduler: SchedulerConfig
    guidance: GuidanceConfig
    pipeline: PipelineOptions

    def __post_init__(self) -> None:
        self._check_latents()
        self._check_text()
        blocks = self.pipeline.spatio_temporal_guidance_blocks
        if any(b >= self.transformer.num_layers for b in blocks):
            raise _fail(
                "pipeline",
                "spatio_temporal_guidance_blocks",
                blocks,
                f"must be < transformer.num_layers={self.transformer.num_layers}",
            )

    def _link(self, a: str, b: str) -> None:
        """``a`` and ``b`` (dotted, on this config) must be equal."""
        va, vb = self._get(a), self._get(b)
        if va != vb:
            raise ValueError(f"{a}={va!r} must equal {b}={vb!r}")

    def _get(self, dotted: str) -> Any:
        obj: Any = self
        for part in dotted.split("."):
            obj = getattr(obj, part)
        return obj

    def _check_latents(self) -> None:
        t, a = self.transformer, self.audio_vae
        self._link("transformer.in_channels", "video_latent_tokens_width")
        self._link("transformer.vae_scale_factors", "video_vae_scale_factors")
        self._link("transformer.audio_in_channels", "audio_vae.packed_latent_channels")
        self._link("audio_vae.base_channels", "audio_vae.packed_latent_channels")  # packed normalisation
        self._link("transformer.audio_sampling_rate", "audio_vae.sample_rate")
        self._link("transformer.audio_hop_length", "audio_vae.mel_hop_length")
        if t.audio_scale_factor != LATENT_DOWNSAMPLE_FACTOR:
            raise _fail(
                "transformer",
                "audio_scale_factor",
                t.audio_scale_factor,
                f"must equal the audio VAE's time compression {LATENT_DOWNSAMPLE_FACTOR}",
            )
        if a.mel_bins is None:
            raise _fail("audio_vae", "mel_bins", None, "the pipeline needs a fixed mel bin count")
        if self.vocoder.in_channels != a.output_channels * a.mel_bins:
            raise ValueError(
                f"vocoder.in_channels={self.vocoder.in_channels} must equal audio_vae.output_channels * "
                f"mel_bins = {a.output_channels * a.mel_bins}"
            )
        if t.out_channels != t.in_channels or t.audio_out_channels != t.audio_in_channels:
            raise _fail("transformer", "out_channels", t.out_channels, "must equal in_channels (audio too)")
        if self.upsampler is not None:
            self._link("upsampler.in_channels", "video_vae.latent_channels")

    def _check_text(self) -> None:
        self._link("connectors.caption_channels", "gemma.hidden_size")
        self._link("connectors.text_proj_in_factor", "gemma.num_hidden_states")
        c, t = self.connectors, self.transformer
        if t.use_prompt_embeddings:  # 2.0: connectors emit caption-wide tokens, the DiT projects them
            self._link("transformer.caption_channels", "connectors.caption_channels")
            if c.per_modality_projections:
                raise _fail(
                    "connectors",
                    "per_modality_projections",
                    True,
                    "2.0 transformers (use_prompt_embeddings=True) take the shared projection",
                )
        else:  # 2.3: connectors emit model-wide tokens
            self._link("connectors.video_hidden_dim", "transformer.inner_dim")
            self._link("connectors.audio_hidden_dim", "transformer.audio_inner_dim")
        for stream in ("video", "audio"):
            regs = c.stream(stream).num_registers
            if regs is not None and self.text_encoder.max_sequence_length % regs:
                length = self.text_encoder.max_sequence_length
                raise ValueError(
                    f"text_encoder.max_sequence_length={length} must be a multiple of "
                    f"connectors.{stream}_connector_num_learnable_registers={regs}"
                )

    # ---- derived -------------------------------------------------------------------------
    @property
    def video_latent_tokens_width(self) -> int:
        """Channels of one packed video token: ``latent_channels * patch_size**2 * patch_size_t``."""
        t = self.transformer
        return self.video_vae.latent_channels * t.patch_size**2 * t.patch_size_t

    @property
    def video_vae_scale_factors(self) -> tuple[int, int, int]:
        v = self.video_vae
        return (v.temporal_compression, v.spatial_compression, v.spatial_compression)

    def replace(self, **changes: Any) -> PipelineConfig:
        return dataclasses.replace(self, **changes)

    def with_sharding_rules(self, rules: Mapping[str, Sequence[str] | str | None]) -> PipelineConfig:
        """This config with some rules of the transformer's strategy replaced (``{"mlp_in": []}``):
        the derived strategy is registered under a name that spells the rules
        (:func:`ltx2.sharding.register_overrides`, e.g. ``naive+mlp_in=-``) and every component
        config that names the transformer's strategy names it instead. No rules: ``self``."""
        if not rules:
            return self
        base = self.transformer.sharding
        derived = register_overrides(base, rules).name
        named = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        changes = {
            n: dataclasses.replace(c, sharding=derived)
            for n, c in named.items()
            if getattr(c, "sharding", None) == base
        }
        return self.replace(**changes)

    # ---- presets -------------------------------------------------------------------------
    @classmethod
    def tiny(cls) -> PipelineConfig:
        """Tests: ``TransformerConfig.tiny`` (STG on: ``perturbed_attn``), 64x64 px, 9 frames, 2 steps."""
        return cls(
            transformer=TransformerConfig.tiny(perturbed_attn=True),
            connectors=ConnectorsConfig.tiny(),
            text_encoder=TextEncoderConfig(max_sequence_length=16),
            gemma=GemmaConfig.tiny(),
            video_vae=VideoVAEConfig.tiny(),
            # packed latent width 2 * 16/4 = 8 = the tiny DiT's audio channels (= base_channels).
            audio_vae=AudioVAEConfig(
                base_channels=8, ch_mult=(1, 2, 4), num_res_blocks=1, resolution=16, latent_channels=2, mel_bins=16
            ),
            vocoder=VocoderConfig.tiny(),
            upsampler=LatentUpsamplerConfig.tiny(),
            scheduler=SchedulerConfig.dev(),
            guidance=GuidanceConfig(),
            pipeline=PipelineOptions(
                num_inference_steps=2, height=64, width=64, num_frames=9, spatio_temporal_guidance_blocks=(1,)
            ),
        )

    @classmethod
    def small(cls) -> PipelineConfig:
        """CPU benchmarks: ``TransformerConfig.small`` (STG on), 128-channel latents, 256x256 px,
        65 frames, 8 steps (the ``experiments/cpu.toml`` workload)."""
        return cls(
            transformer=TransformerConfig.small(perturbed_attn=True),
            connectors=ConnectorsConfig(
                caption_channels=128,
                text_proj_in_factor=5,
                video_connector_num_attention_heads=4,
                video_connector_attention_head_dim=32,
                video_connector_num_layers=1,
                video_connector_num_learnable_registers=32,
                audio_connector_num_attention_heads=4,
                audio_connector_attention_head_dim=32,
                audio_connector_num_layers=1,
                audio_connector_num_learnable_registers=32,
                rope_type="split",
                video_hidden_dim=128,
                audio_hidden_dim=64,
            ),
            text_encoder=TextEncoderConfig(max_sequence_length=128),
            gemma=GemmaConfig.small(),
            video_vae=dataclasses.replace(VideoVAEConfig.small(), latent_channels=128),
            audio_vae=AudioVAEConfig(base_channels=128, num_res_blocks=1),
            vocoder=VocoderConfig(
                in_channels=128, hidden_channels=128, resnet_kernel_sizes=(3,), resnet_dilations=((1, 3, 5),)
            ),
            upsampler=LatentUpsamplerConfig(in_channels=128, mid_channels=64, num_blocks_per_stage=1),
            scheduler=SchedulerConfig.dev(),
            guidance=GuidanceConfig(),
            pipeline=PipelineOptions(
                num_inference_steps=8, height=256, width=256, num_frames=65, spatio_temporal_guidance_blocks=(1,)
            ),
        )

    @classmethod
    def medium(cls) -> PipelineConfig:
        """CPU compute-bound benchmark size: ``small`` with ``TransformerConfig.medium`` (8x the width,
        STG on) and the text path widened to its 1024 caption channels (Gemma-3 hidden size,
        connector width; 16 x 64 heads)."""
        small = cls.small()
        connectors = dataclasses.replace(
            small.connectors,
            caption_channels=1024,
            video_hidden_dim=1024,
            audio_hidden_dim=512,
            video_connector_num_attention_heads=16,
            video_connector_attention_head_dim=64,
            audio_connector_num_attention_heads=16,
            audio_connector_attention_head_dim=64,
        )
        return small.replace(
            transformer=TransformerConfig.medium(perturbed_attn=True),
            connectors=connectors,
            gemma=small.gemma.replace(hidden_size=1024, intermediate_size=2048),
        )

    @classmethod
    def ltx2_19b(cls) -> PipelineConfig:
        """Released LTX-2.0 (``Lightricks/LTX-2`` dev checkpoint) with Gemma-3-12B."""
        return cls(
            transformer=TransformerConfig.ltx2_19b(),
            connectors=ConnectorsConfig.ltx2_19b(),
            text_encoder=TextEncoderConfig(),
            gemma=GemmaConfig.gemma3_12b(),
            video_vae=VideoVAEConfig.ltx2_19b(),
            audio_vae=AudioVAEConfig.ltx2_19b(),
            vocoder=VocoderConfig.ltx2_19b(),
            upsampler=LatentUpsamplerConfig.ltx2_19b(),
            scheduler=SchedulerConfig.dev(),
            guidance=GuidanceConfig(),
            pipeline=PipelineOptions(spatio_temporal_guidance_blocks=(29,)),
        )

    @classmethod
    def ltx2_3_22b(cls) -> PipelineConfig:
        """LTX-2.3: gated attention, prompt modulation, per-modality connectors, BWE vocoder
        (48 kHz), pixel-shuffle upsampler. The video VAE is the 2.0 layout (our port has no
        2.3 VAE preset)."""
        return cls(
            transformer=TransformerConfig.ltx2_3_22b(),
            connectors=ConnectorsConfig.ltx2_3(),
            text_encoder=TextEncoderConfig(),
            gemma=GemmaConfig.gemma3_12b(),
            video_vae=VideoVAEConfig.ltx2_19b(),
            audio_vae=AudioVAEConfig.ltx2_19b(),
            vocoder=VocoderWithBWEConfig.ltx2_3_22b(),
            upsampler=LatentUpsamplerConfig.ltx2_3_22b(),
            scheduler=SchedulerConfig.dev(),
            guidance=GuidanceConfig(),
            pipeline=PipelineOptions(spatio_temporal_guidance_blocks=(28,)),
        )

    @classmethod
    def preset(cls, name: str) -> PipelineConfig:
        """By name: ``tiny``, ``small``, ``medium``, ``ltx2_19b`` / ``ltx2-19b``, ``ltx2_3_22b`` / ``ltx2.3-22b``."""
        key = name.replace("-", "_").replace(".", "_")
        if key not in PRESETS:
            raise ValueError(f"unknown pipeline preset {name!r}; known: {sorted(PRESETS)}")
        return getattr(cls, key)()


PRESETS = ("tiny", "small", "medium", "ltx2_19b", "ltx2_3_22b")
