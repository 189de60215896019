"""A diffusers-format LTX-2 pipeline directory on disk -> :class:`ltx2.pipeline.LTX2Pipeline`.

Reads ``model_index.json`` and, per component folder, ``config.json`` (``scheduler_config.json``
for the scheduler) and ``diffusion_pytorch_model*.safetensors`` (sharded ones through their
``.index.json``), as ``LTX2Pipeline.save_pretrained`` writes them. The Gemma-3 encoder
(``text_encoder/``) loads with transformers from the same directory, the tokenizer from
``tokenizer/``; both are optional. A ``latent_upsampler/`` folder adds the upsampler. Nothing is
downloaded. Every problem names the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flax import nnx

from ltx2.config import TransformerConfig
from ltx2.convert import audio_vae, connectors, upsampler, video_vae, vocoder
from ltx2.convert.keymap import load_state_dict
from ltx2.convert.transformer import transformer_rules
from ltx2.guidance import GuidanceConfig
from ltx2.pipeline import LTX2Pipeline
from ltx2.pipeline_config import GemmaConfig, PipelineConfig, PipelineOptions
from ltx2.scheduler import config_from_diffusers
from ltx2.text.connectors import ConnectorsConfig
from ltx2.text.gemma import TextEncoderConfig
from ltx2.transformer import LTX2Transformer
from ltx2.vae.audio import AudioVAEConfig
from ltx2.vae.upsampler import LatentUpsamplerConfig
from ltx2.vae.video import VideoVAEConfig
from ltx2.vae.vocoder import VocoderConfig, VocoderWithBWEConfig

REQUIRED = ("transformer", "connectors", "vae", "audio_vae", "vocoder", "scheduler")
VOCODERS: dict[str, Any] = {"LTX2Vocoder": VocoderConfig, "LTX2VocoderWithBWE": VocoderWithBWEConfig}


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"missing {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt JSON in {path}: {e}") from e


def read_weights(folder: Path) -> dict[str, Any]:
    """Every tensor of a component folder's safetensors (one file or an indexed set)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    index = folder / "diffusion_pytorch_model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in read_json(index)["weight_map"].values()})
    else:
        files = [folder / "diffusion_pytorch_model.safetensors"]
    tensors: dict[str, Any] = {}
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"missing weights {f}")
        try:
            tensors.update(load_file(str(f)))
        except (SafetensorError, OSError, ValueError) as e:
            raise ValueError(f"corrupt safetensors file {f}: {e}") from e
    return tensors


def _component(root: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = root / name
    if not folder.is_dir():
        raise FileNotFoundError(f"missing component folder {folder} (listed in {root / 'model_index.json'})")
    return read_json(folder / "config.json"), read_weights(folder)


def _gemma_config(root: Path, conn: ConnectorsConfig) -> GemmaConfig:
    """Sizes of the saved Gemma-3 encoder, or 12B-like sizes that fit the connectors."""
    path = root / "text_encoder" / "config.json"
    if not path.is_file():
        return GemmaConfig.gemma3_12b().replace(
            hidden_size=conn.caption_channels, num_hidden_layers=conn.text_proj_in_factor - 1
        )
    text = read_json(path)
    text = text.get("text_config", text)
    names = {
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "query_pre_attn_scalar",
        "sliding_window",
        "max_position_embeddings",
    }
    return GemmaConfig(**{k: int(v) for k, v in text.items() if k in names})


def _text_encoder(root: Path, cfg: TextEncoderConfig) -> Any:
    from transformers import AutoModel

    from ltx2.convert.gemma import from_transformers

    try:
        model = AutoModel.from_pretrained(str(root / "text_encoder"), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load the text encoder from {root / 'text_encoder'}: {e}") from e
    return from_transformers(model, cfg)


def load_pretrained(
    directory: str | Path,
    *,
    options: PipelineOptions | None = None,
    guidance: GuidanceConfig | None = None,
    text_encoder: TextEncoderConfig | None = None,
    load_text_encoder: bool = True,
    **knobs: Any,
) -> LTX2Pipeline:
    """The pipeline saved in ``directory`` (diffusers ``save_pretrained`` layout). ``knobs`` set
    our transformer fields (``scan_layers``, ``sharding``, ``dtype`` ...)."""
    root = Path(directory)
    index = read_json(root / "model_index.json")
    absent = [n for n in REQUIRED if not index.get(n) or index[n][0] is None]
    if absent:
        raise ValueError(f"{root / 'model_index.json'} lists no {absent}: an LTX-2 pipeline needs {list(REQUIRED)}")
    loaded = {name: _component(root, name) for name in ("transformer", "connectors", "vae", "audio_vae", "vocoder")}
    t_cfg = TransformerConfig.from_diffusers_config(loaded["transformer"][0], **knobs)
    c_cfg = ConnectorsConfig.from_diffusers_config(loaded["connectors"][0])
    v_cfg = VideoVAEConfig.from_diffusers(loaded["vae"][0])
    a_cfg = AudioVAEConfig.from_diffusers(loaded["audio_vae"][0])
    voc_json = loaded["vocoder"][0]
    voc_cls = VOCODERS.get(voc_json.get("_class_name", "LTX2Vocoder"))
    if voc_cls is None:
        raise ValueError(f"{root / 'vocoder' / 'config.json'}: unknown vocoder class {voc_json.get('_class_name')!r}")
    up = None
    if (root / "latent_upsampler").is_dir():
        up = _component(root, "latent_upsampler")
    stg = (28,) if t_cfg.num_layers > 28 else (t_cfg.num_layers - 1,)
    te_cfg = text_encoder or TextEncoderConfig(
        tokenizer_dir=str(root / "tokenizer") if (root / "tokenizer").is_dir() else None
    )
    cfg = PipelineConfig(
        transformer=t_cfg,
        connectors=c_cfg,
        text_encoder=te_cfg,
        gemma=_gemma_config(root, c_cfg),
        video_vae=v_cfg,
        audio_vae=a_cfg,
        vocoder=voc_cls.from_diffusers(voc_json),
        upsampler=LatentUpsamplerConfig.from_diffusers(up[0]) if up is not None else None,
        scheduler=config_from_diffusers(read_json(root / "scheduler" / "scheduler_config.json")),
        guidance=guidance or GuidanceConfig(),
        pipeline=options or PipelineOptions(spatio_temporal_guidance_blocks=stg),
    )
    transformer = nnx.eval_shape(lambda: LTX2Transformer(t_cfg, rngs=nnx.Rngs(0)))
    load_state_dict(transformer, loaded["transformer"][1], transformer_rules())
    has_encoder = index.get("text_encoder", [None])[0] is not None and (root / "text_encoder").is_dir()
    return LTX2Pipeline(
        cfg,
        transformer=transformer,
        connectors=connectors.load(c_cfg, loaded["connectors"][1]),
        video_vae=video_vae.load(v_cfg, loaded["vae"][1]),
        audio_vae=audio_vae.load(a_cfg, loaded["audio_vae"][1]),
        vocoder=vocoder.load(cfg.vocoder, loaded["vocoder"][1]),
        upsampler=upsampler.load(cfg.upsampler, up[1]) if up is not None and cfg.upsampler is not None else None,
        text_encoder=_text_encoder(root, te_cfg) if has_encoder and load_text_encoder else None,
    )


def diffusers_call_kwargs(cfg: PipelineConfig) -> dict[str, Any]:
    """The keyword arguments of diffusers ``LTX2Pipeline.__call__`` that make it generate what
    ``cfg`` does (size, steps, every guidance scale, STG blocks); add the prompts, latents and
    ``output_type``. For side-by-side runs (parity tests, benchmarks)."""
    g, o = cfg.guidance, cfg.pipeline
    return dict(
        height=o.height,
        width=o.width,
        num_frames=o.num_frames,
        frame_rate=o.frame_rate,
        num_inference_steps=o.num_inference_steps,
        guidance_scale=g.guidance_scale,
        stg_scale=g.stg_scale,
        modality_scale=g.modality_scale,
        guidance_rescale=g.guidance_rescale,
        audio_guidance_scale=g.audio_guidance_scale,
        audio_stg_scale=g.audio_stg_scale,
        audio_modality_scale=g.audio_modality_scale,
        audio_guidance_rescale=g.audio_guidance_rescale,
        spatio_temporal_guidance_blocks=list(o.spatio_temporal_guidance_blocks),
        use_cross_timestep=o.use_cross_timestep,
    )
