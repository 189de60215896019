"""``python -m ltx2.generate``: the documented command as written (random-weight preset, no
prompt: fixed ids), the Python loop's per-step progress, and the prompt options' errors, which
are decided from the arguments before anything is built."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import wave
from pathlib import Path

import pytest

import ltx2
from ltx2.generate import RANDOM_WEIGHTS_PROMPT_IDS, parse_args, token_ids

# The subprocess imports the ltx2 under test, wherever this checkout is (not an installed copy).
ENV = {
    **os.environ,
    "JAX_PLATFORMS": "cpu",
    "PYTHONPATH": os.pathsep.join(
        [str(Path(ltx2.__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    ),
}


def _generate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ltx2.generate", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=ENV, timeout=900)


def _streams(mp4: Path) -> list[tuple[str, str, str]]:
    """(kind, codec, details) of each stream, as the ffmpeg binary of imageio-ffmpeg reads the file."""
    import imageio_ffmpeg

    probe = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(mp4)], capture_output=True, text=True
    )
    return re.findall(r"Stream #0:\d+.*?: (Video|Audio): (\w+)(.*)", probe.stderr)


@pytest.mark.slow
def test_documented_command_writes_mp4_with_video_and_stereo_audio(tmp_path: Path) -> None:
    """README and ``--help``: ``python -m ltx2.generate --preset tiny --out out.mp4``, verbatim."""
    done = _generate(tmp_path, "--preset", "tiny", "--out", "out.mp4")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"fixed prompt ids {RANDOM_WEIGHTS_PROMPT_IDS}" in done.stdout
    streams = _streams(tmp_path / "out.mp4")
    assert sorted((kind, codec) for kind, codec, _ in streams) == [("Audio", "aac"), ("Video", "h264")], streams
    assert "stereo" in next(details for kind, _, details in streams if kind == "Audio")
    assert (tmp_path / "out.wav").is_file()


@pytest.mark.slow
def test_python_loop_reports_steps_and_writes_wav(tmp_path: Path) -> None:
    import imageio_ffmpeg

    out = tmp_path / "tiny.mp4"
    done = _generate(tmp_path, "--preset", "tiny", "--prompt-ids", "2,17,33,4", "--out", str(out), "--loop", "python")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step 2/2" in done.stdout  # per-step progress of the Python loop
    assert "fixed prompt ids" not in done.stdout
    assert sorted((kind, codec) for kind, codec, _ in _streams(out)) == [("Audio", "aac"), ("Video", "h264")]
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(out))
    assert frames == 9  # PipelineConfig.tiny(): 9 frames at 64x64
    with wave.open(str(out.with_suffix(".wav"))) as w:
        # 9 latent audio frames -> 33 mel frames -> x240 vocoder upsampling, stereo, 24 kHz.
        assert (w.getnchannels(), w.getframerate(), w.getnframes()) == (2, 24000, 7920)


def test_preset_without_prompt_uses_the_fixed_ids() -> None:
    args = parse_args(["--preset", "tiny", "--out", "out.mp4"])
    assert (args.prompt_ids, args.fixed_prompt) == (RANDOM_WEIGHTS_PROMPT_IDS, True)
    args = parse_args(["--out", "out.mp4", "--prompt-ids", "2,5"])
    assert (args.prompt_ids, args.fixed_prompt) == ("2,5", False)
    ids, mask = token_ids(RANDOM_WEIGHTS_PROMPT_IDS, 16, vocab_size=128)  # tiny's text length and vocabulary
    assert ids.tolist() == [[0] * 12 + [2, 17, 33, 4]] and mask.tolist() == [[0] * 12 + [1] * 4]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt", "a cat"], r"--prompt needs a tokenizer and there is none \(the presets ship none\)"),
        (["--prompt", "a cat", "--prompt-ids", "2"], "at most one of --prompt-ids and --prompt"),
        (["--weights", "{tmp}"], "--weights: give the prompt"),
        (["--weights", "{tmp}", "--prompt", "a cat"], r"there is none \(.*tokenizer does not exist\)"),
    ],
)
def test_prompt_errors_name_what_is_missing(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args([a.format(tmp=tmp_path) for a in argv] + ["--out", "out.mp4"])
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_prompt_with_a_tokenizer_folder_parses(tmp_path: Path) -> None:
    (tmp_path / "tokenizer").mkdir()
    args = parse_args(["--weights", str(tmp_path), "--prompt", "a cat", "--out", "out.mp4"])
    assert args.prompt == "a cat" and args.prompt_ids is None and not args.fixed_prompt


@pytest.mark.parametrize(
    ("text", "message"),
    [("2,128", r"in \[0, 128\)"), ("2,x", "comma-separated integers"), ("", "need 1..16 token ids")],
)
def test_token_ids_reject_bad_ids(text: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        token_ids(text, 16, vocab_size=128)
