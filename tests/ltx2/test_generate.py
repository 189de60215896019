"""``python -m ltx2.generate`` at the tiny preset: an MP4 with one video and one audio stream
and the right frame count, and a WAV of the vocoder's length and rate."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import wave
from pathlib import Path

import pytest


@pytest.mark.slow
def test_generate_writes_mp4_with_audio_and_wav(tmp_path: Path) -> None:
    import imageio_ffmpeg

    out = tmp_path / "tiny.mp4"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "ltx2.generate", "--preset", "tiny", "--prompt-ids", "2,17,33,4", "--out", str(out),
         "--loop", "python"],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step 2/2" in done.stdout  # per-step progress of the Python loop
    probe = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(out)],
                           capture_output=True, text=True)  # fmt: skip
    streams = re.findall(r"Stream #0:\d+.*?: (Video|Audio): (\w+)", probe.stderr)
    assert sorted(streams) == [("Audio", "aac"), ("Video", "h264")], probe.stderr
    frames, _ = imageio_ffmpeg.count_frames_and_secs(str(out))
    assert frames == 9  # PipelineConfig.tiny(): 9 frames at 64x64
    with wave.open(str(out.with_suffix(".wav"))) as w:
        # 9 latent audio frames -> 33 mel frames -> x240 vocoder upsampling, stereo, 24 kHz.
        assert (w.getnchannels(), w.getframerate(), w.getnframes()) == (2, 24000, 7920)
