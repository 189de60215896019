"""Generate a video with its audio track: ``python -m ltx2.generate --preset tiny --out out.mp4``.

Random weights for a preset, or a diffusers-format directory with ``--weights DIR``
(:func:`ltx2.convert.load_pretrained`). Prompts are token ids (``--prompt-ids 2,651,...``) or
text with a local tokenizer (``--prompt "..."`` with ``--tokenizer DIR`` or ``DIR/tokenizer`` of
``--weights``; none ships with the presets). A preset run without a prompt uses fixed ids
(``RANDOM_WEIGHTS_PROMPT_IDS``) and says so: with random weights every prompt means as little.
Writes ``OUT.mp4`` (H.264 + AAC, muxed by the ffmpeg binary that the ``imageio-ffmpeg`` wheel
ships) and ``OUT.wav``.

Progress: each stage reports when it finishes and how long it took. With ``--loop python``
the denoising loop reports every step; with ``--loop scan`` the loop is one compiled program,
so there is nothing to report between steps, and it reports once at the end.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import wave
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_NEGATIVE_IDS = "2"  # Gemma's <bos>: what the tokenizer makes of an empty negative prompt
# The prompt of a preset run given none: Gemma's <bos>, then three ids inside every preset's
# vocabulary (tiny's has 128). Fixed, so the documented command is deterministic for a seed.
RANDOM_WEIGHTS_PROMPT_IDS = "2,17,33,4"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ltx2.generate", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", default="tiny", help="tiny | small | ltx2_19b | ltx2_3_22b (random weights)")
    src.add_argument("--weights", type=Path, help="diffusers-format pipeline directory")
    p.add_argument(
        "--prompt-ids",
        help=f"comma-separated token ids of the prompt (a preset given no prompt uses {RANDOM_WEIGHTS_PROMPT_IDS})",
    )
    p.add_argument("--negative-ids", default=DEFAULT_NEGATIVE_IDS, help="comma-separated ids of the negative prompt")
    p.add_argument("--prompt", help="prompt text (needs --tokenizer, or a tokenizer/ folder in --weights)")
    p.add_argument("--negative-prompt", default="", help="negative prompt text")
    p.add_argument("--tokenizer", type=Path, help="local tokenizer directory")
    p.add_argument("--out", type=Path, required=True, help="output .mp4 (the .wav goes next to it)")
    p.add_argument("--steps", type=int, help="denoising steps (default: the config's)")
    p.add_argument("--height", type=int)
    p.add_argument("--width", type=int)
    p.add_argument("--num-frames", type=int)
    p.add_argument("--frame-rate", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loop", choices=("scan", "python"), help="denoising loop (default: the config's)")
    args = p.parse_args(argv)
    args.fixed_prompt = False
    if args.prompt_ids is not None and args.prompt is not None:
        p.error("give at most one of --prompt-ids and --prompt")
    if args.prompt is not None and tokenizer_dir(args) is None:
        where = f"{args.weights / 'tokenizer'} does not exist" if args.weights else "the presets ship none"
        p.error(
            f"--prompt needs a tokenizer and there is none ({where}): pass --tokenizer DIR "
            "(a local Gemma-3 tokenizer directory) or token ids with --prompt-ids"
        )
    if args.prompt is None and args.prompt_ids is None:
        if args.weights is not None:
            p.error("--weights: give the prompt, as --prompt text or --prompt-ids")
        args.prompt_ids, args.fixed_prompt = RANDOM_WEIGHTS_PROMPT_IDS, True
    return args


def tokenizer_dir(args: argparse.Namespace) -> Path | None:
    """``--tokenizer``, else the ``tokenizer/`` folder of ``--weights`` (what ``load_pretrained`` loads)."""
    if args.tokenizer is not None:
        return Path(args.tokenizer)
    if args.weights is not None and (Path(args.weights) / "tokenizer").is_dir():
        return Path(args.weights) / "tokenizer"
    return None


def token_ids(text: str, length: int, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``"1,2,3"`` -> left-padded ids and mask ``[1, length]`` int32."""
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise SystemExit(f"error: token ids must be comma-separated integers, got {text!r}") from None
    if not ids or len(ids) > length:
        raise SystemExit(f"error: need 1..{length} token ids, got {len(ids)}")
    if not all(0 <= i < vocab_size for i in ids):
        raise SystemExit(f"error: token ids must be in [0, {vocab_size}) (the text encoder's vocabulary), got {ids}")
    out, mask = np.zeros((1, length), np.int32), np.zeros((1, length), np.int32)
    out[0, length - len(ids) :], mask[0, length - len(ids) :] = ids, 1
    return out, mask


def build(args: argparse.Namespace) -> Any:
    from ltx2.pipeline import LTX2Pipeline
    from ltx2.pipeline_config import PipelineConfig

    if args.weights is not None:
        from ltx2.convert import load_pretrained

        pipe = load_pretrained(args.weights)
    else:
        pipe = LTX2Pipeline.from_config(PipelineConfig.preset(args.preset), seed=args.seed)
    if args.tokenizer is not None:
        from ltx2.text.gemma import load_tokenizer

        if pipe.text_encoder is None:
            raise SystemExit("error: --tokenizer given, but the pipeline has no text encoder")
        pipe.text_encoder.tokenizer = load_tokenizer(str(args.tokenizer))
    return pipe


def write_wav(path: Path, waveform_cn: np.ndarray, rate: int) -> None:
    """float waveform ``[channels, samples]`` in [-1, 1] -> 16-bit PCM WAV."""
    pcm = (np.clip(waveform_cn, -1.0, 1.0) * 32767).round().astype("<i2").T
    with wave.open(str(path), "wb") as f:
        f.setnchannels(pcm.shape[1])
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def write_mp4(path: Path, frames_fhwc: np.ndarray, fps: float, wav: Path) -> None:
    """uint8 frames ``[F, H, W, 3]`` + a WAV -> H.264/AAC MP4 (imageio-ffmpeg's ffmpeg binary)."""
    import imageio_ffmpeg

    f, h, w, _ = frames_fhwc.shape
    cmd = [
        imageio_ffmpeg.get_ffmpeg_exe(),
        "-y",
        "-loglevel",
        "error",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "-s",
        f"{w}x{h}",
        "-r",
        str(fps),
        "-i",
        "-",
        "-i",
        str(wav),
        "-map",
        "0:v",
        "-map",
        "1:a",
        "-c:v",
        "libx264",
        "-pix_fmt",
        "yuv420p",
        "-c:a",
        "aac",
        str(path),
    ]
    done = subprocess.run(cmd, input=np.ascontiguousarray(frames_fhwc).tobytes(), capture_output=True)
    if done.returncode:
        raise RuntimeError(f"ffmpeg failed ({done.returncode}) writing {path}: {done.stderr.decode()[-2000:]}")


def stage(name: str, fn: Callable[[], Any]) -> Any:
    import jax

    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    print(f"[{name}] {time.perf_counter() - t:.2f} s", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    import jax

    args = parse_args(argv)
    if args.fixed_prompt:
        print(
            f"no prompt given: random weights of preset {args.preset!r} with the fixed prompt ids "
            f"{args.prompt_ids} (--prompt-ids to choose)",
            flush=True,
        )
    pipe = stage("build", lambda: build(args))
    o = pipe.cfg.pipeline
    loop = args.loop or o.diffusion_loop
    plan = pipe.plan(height=args.height, width=args.width, num_frames=args.num_frames, frame_rate=args.frame_rate)
    if args.prompt is not None:
        text = stage(
            "text_encode",
            lambda: pipe.encode_prompt(prompt=args.prompt, negative_prompt=args.negative_prompt, plan=plan),
        )
    else:
        length, vocab = pipe.cfg.text_encoder.max_sequence_length, pipe.cfg.gemma.vocab_size
        (ids, mask), (neg, neg_mask) = (token_ids(t, length, vocab) for t in (args.prompt_ids, args.negative_ids))
        text = stage("text_encode", lambda: pipe.encode_prompt(ids, mask, neg, neg_mask, plan=plan))
    k_latents, k_decode = jax.random.split(jax.random.key(args.seed))
    x = stage("prepare_latents", lambda: pipe.prepare_latents(plan, key=k_latents))
    schedule = pipe.schedule(plan, args.steps)
    n = int(schedule.timesteps.shape[0])
    t0 = time.perf_counter()

    def progress(i: int, total: int) -> None:
        bar = "#" * (20 * i // total)
        print(f"\r[denoise {loop}] {bar:<20} step {i}/{total}  {time.perf_counter() - t0:.1f} s", end="", flush=True)

    if loop == "scan":
        print(f"[denoise scan] {n} steps in one compiled program: no per-step progress", flush=True)
    x = pipe.denoise(x, text, schedule, pipe.scales(), plan, loop=loop, progress=progress)
    print(flush=True)
    video = stage("video_decode", lambda: pipe.decode_video(x.video, plan, key=k_decode))
    audio = stage("audio_decode", lambda: pipe.decode_audio(x.audio, plan))
    frames = (np.asarray(video[0]) * 255).round().astype(np.uint8)
    wav = args.out.with_suffix(".wav")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_wav(wav, np.asarray(audio[0]), pipe.cfg.vocoder.output_sampling_rate)
    write_mp4(args.out, frames, plan.fps, wav)
    print(
        f"wrote {args.out} ({frames.shape[0]} frames {frames.shape[2]}x{frames.shape[1]} @ {plan.fps:g} fps) "
        f"and {wav} ({audio.shape[-1]} samples @ {pipe.cfg.vocoder.output_sampling_rate} Hz)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
