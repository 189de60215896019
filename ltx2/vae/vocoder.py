"""LTX-2 vocoders: stereo mel spectrograms -> waveforms, in Flax NNX.

Follows diffusers ``pipelines/ltx2/vocoder.py``: :class:`LTX2Vocoder` (LTX-2.0, a HiFi-GAN
generator, 16 kHz mel -> 24 kHz audio) and :class:`LTX2VocoderWithBWE` (LTX-2.3, a BigVGAN-style
generator with snake activations and anti-aliased resampling, followed by a bandwidth extender
to 48 kHz).

Public ``__call__`` takes diffusers' mel layout ``[B, 2, T, M]`` and returns ``[B, 2, N]``; inside
everything runs channels-last ``[B, N, C]`` (suffix ``_bnc``), the time axis growing by
``prod(upsample_factors)`` through the upsampling stages. The configs are in
:mod:`ltx2.vae.vocoder_config` (re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2 import scopes
from ltx2.sharding import constrain, param
from ltx2.vae.conv import Conv, buffer, pad
from ltx2.vae.vocoder_config import VocoderConfig, VocoderWithBWEConfig

_ACT = ("activation_batch", "activation_frames", "activation_channels")


# ----------------------------------------------------------------------------- filters


def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> np.ndarray:
    """diffusers ``kaiser_sinc_filter1d``: a normalised Kaiser-windowed sinc low-pass ``[K]``."""
    delta_f = 4 * half_width
    half = kernel_size // 2
    amplitude = 2.285 * (half - 1) * math.pi * delta_f + 7.95
    if amplitude > 50.0:
        beta = 0.1102 * (amplitude - 8.7)
    elif amplitude >= 21.0:
        beta = 0.5842 * (amplitude - 21) ** 0.4 + 0.07886 * (amplitude - 21.0)
    else:
        beta = 0.0
    window = np.kaiser(kernel_size, beta)
    t = np.arange(-half, half) + 0.5 if kernel_size % 2 == 0 else np.arange(kernel_size) - half
    if cutoff == 0.0:
        return np.zeros(kernel_size, np.float32)
    taps = 2 * cutoff * window * np.sinc(2 * cutoff * t)
    return (taps / taps.sum()).astype(np.float32)


def hann_sinc_filter(ratio: int, rolloff: float = 0.99, lowpass_width: int = 6) -> np.ndarray:
    """The Hann-windowed sinc of diffusers ``UpSample1d(window_type="hann")``, ``[2*w*ratio + 1]``."""
    width = math.ceil(lowpass_width / rolloff)
    t = (np.arange(2 * width * ratio + 1, dtype=np.float32) / ratio - width) * rolloff
    window = np.cos(np.clip(t, -lowpass_width, lowpass_width) * math.pi / lowpass_width / 2) ** 2
    return (np.sinc(t) * window * rolloff / ratio).astype(np.float32)


def _depthwise(
    x_bnc: jax.Array, taps: jax.Array, *, stride: int = 1, lhs_dilation: int = 1, padding: tuple[int, int] = (0, 0)
) -> jax.Array:
    """One filter ``taps [K]`` applied to every channel (torch ``groups=C``)."""
    c = x_bnc.shape[-1]
    kernel = jnp.broadcast_to(taps.astype(x_bnc.dtype)[:, None, None], (taps.shape[0], 1, c))
    return jax.lax.conv_general_dilated(
        x_bnc,
        kernel,
        (stride,),
        (padding,),
        lhs_dilation=(lhs_dilation,),
        dimension_numbers=("NWC", "WIO", "NWC"),
        feature_group_count=c,
    )


def upsample_1d(x_bnc: jax.Array, taps: jax.Array, ratio: int, pad_: int, crop: tuple[int, int]) -> jax.Array:
    """diffusers ``UpSample1d.forward``: replicate-pad ``pad_``, ``ratio * conv_transpose1d`` with
    stride ``ratio`` (a dilated conv with the flipped taps), then drop ``crop`` samples at each end."""
    k = taps.shape[0]
    x = pad(x_bnc, ((pad_, pad_),), "replicate")
    y = ratio * _depthwise(x, taps[::-1], lhs_dilation=ratio, padding=(k - 1, k - 1))
    return y[:, crop[0] : y.shape[1] - crop[1]]


class UpSample1d(nnx.Module):
    """Kaiser-sinc x``ratio`` upsampler (BigVGAN); ``filter`` is a checkpoint buffer. ``[B,N,C] -> [B,rN,C]``."""

    def __init__(self, ratio: int, kernel_size: int):
        self.ratio = ratio
        self.pad = kernel_size // ratio - 1
        self.crop = (self.pad * ratio + (kernel_size - ratio) // 2, self.pad * ratio + (kernel_size - ratio + 1) // 2)
        self.filter = buffer(jnp.asarray(kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size)), (None,))

    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        return upsample_1d(x_bnc, self.filter[...], self.ratio, self.pad, self.crop)


class DownSample1d(nnx.Module):
    """Kaiser-sinc low-pass, stride ``ratio``, replicate padding. ``[B, N, C] -> [B, N/r, C]``."""

    def __init__(self, ratio: int, kernel_size: int):
        self.ratio = ratio
        self.pads = ((kernel_size // 2 + kernel_size % 2 - 1, kernel_size // 2),)
        self.filter = buffer(jnp.asarray(kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size)), (None,))

    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        return _depthwise(pad(x_bnc, self.pads, "replicate"), self.filter[...], stride=self.ratio)


# ----------------------------------------------------------------------------- activations


class LeakyReLU(nnx.Module):
    def __init__(self, negative_slope: float):
        self.negative_slope = negative_slope

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.leaky_relu(x, self.negative_slope)


class SnakeBeta(nnx.Module):
    """``x + sin^2(x e^alpha) / (e^beta + 1e-9)`` per channel (log-scale params; ``beta = alpha`` when
    ``use_beta`` is off, i.e. plain snake)."""

    def __init__(self, channels: int, *, use_beta: bool, dtype: jnp.dtype):
        self.alpha = param(jnp.zeros((channels,), dtype), ("conv_out",))
        self.beta = param(jnp.zeros((channels,), dtype), ("conv_out",)) if use_beta else None

    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        alpha = jnp.exp(self.alpha[...].astype(x_bnc.dtype))
        amp = alpha if self.beta is None else jnp.exp(self.beta[...].astype(x_bnc.dtype))
        return x_bnc + (1.0 / (amp + 1e-9)) * jnp.square(jnp.sin(x_bnc * alpha))


class AntiAliasAct1d(nnx.Module):
    """diffusers ``AntiAliasAct1d``: upsample x``ratio``, activation, low-pass and decimate."""

    def __init__(self, act: nnx.Module, ratio: int, kernel_size: int):
        self.upsample = UpSample1d(ratio, kernel_size)
        self.act = act
        self.downsample = DownSample1d(ratio, kernel_size)

    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        return self.downsample(self.act(self.upsample(x_bnc)))


def _activation(cfg: VocoderConfig, channels: int, *, use_beta: bool | None = None) -> nnx.Module:
    """The activation diffusers builds for ``cfg.act_fn`` (``use_beta`` forces snake's beta)."""
    if cfg.act_fn == "leaky_relu":
        return LeakyReLU(cfg.leaky_relu_negative_slope)
    beta = cfg.act_fn == "snakebeta" if use_beta is None else use_beta
    act: nnx.Module = SnakeBeta(channels, use_beta=beta, dtype=jnp.dtype(cfg.dtype))
    return AntiAliasAct1d(act, cfg.antialias_ratio, cfg.antialias_kernel_size) if cfg.antialias else act


# ----------------------------------------------------------------------------- generator


def _same_pads(kernel: int, dilation: int) -> tuple[tuple[int, int]]:
    total = dilation * (kernel - 1)  # torch padding="same": the odd sample goes after
    return ((total // 2, total - total // 2),)


class Conv1d(nnx.Module):
    """torch ``nn.Conv1d`` with explicit zero padding on ``[B, N, C]``."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        *,
        dilation: int = 1,
        pads: tuple[tuple[int, int]],
        use_bias: bool = True,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.pads = pads
        self.conv = Conv(cin, cout, (kernel,), dilation=dilation, use_bias=use_bias, dtype=dtype, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        return self.conv(pad(x_bnc, self.pads))


class ConvTranspose1d(nnx.Module):
    """torch ``nn.ConvTranspose1d(cin, cout, k, stride, padding=p)``: ``[B, N, Cin] -> [B, (N-1)s - 2p + k, Cout]``.
    Kernel ``[k, Cin, Cout]`` (torch's ``[Cin, Cout, k]`` moved), run as a stride-dilated conv with
    the taps flipped."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, padding: int, *, dtype: jnp.dtype, rngs: nnx.Rngs
    ):
        self.stride, self.padding = stride, padding
        init = nnx.initializers.lecun_normal()
        self.kernel = param(init(rngs.params(), (kernel, cin, cout), dtype), (None, "conv_in", "conv_out"))
        self.bias = param(jnp.zeros((cout,), dtype), ("conv_out",))

    @scopes.module_scope
    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        k = self.kernel.shape[0]
        edge = k - 1 - self.padding
        y = jax.lax.conv_general_dilated(
            x_bnc,
            self.kernel[...].astype(x_bnc.dtype)[::-1],
            (1,),
            ((edge, edge),),
            lhs_dilation=(self.stride,),
            dimension_numbers=("NWC", "WIO", "NWC"),
            preferred_element_type=jnp.float32,
        )
        return (y + self.bias[...].astype(jnp.float32)).astype(x_bnc.dtype)  # one rounding, as torch's


class ResBlock(nnx.Module):
    """diffusers vocoder ``ResBlock``: ``x += conv2_m(act2_m(conv1_m(act1_m(x))))`` for each dilation
    ``m`` (``conv1`` dilated, both "same" padded). ``[B, N, C] -> [B, N, C]``."""

    def __init__(self, cfg: VocoderConfig, channels: int, kernel: int, dilations: Sequence[int], *, rngs: nnx.Rngs):
        dtype = jnp.dtype(cfg.dtype)
        self.convs1 = nnx.List(
            [
                Conv1d(channels, channels, kernel, dilation=d, pads=_same_pads(kernel, d), dtype=dtype, rngs=rngs)
                for d in dilations
            ]
        )
        self.convs2 = nnx.List(
            [Conv1d(channels, channels, kernel, pads=_same_pads(kernel, 1), dtype=dtype, rngs=rngs) for _ in dilations]
        )
        self.acts1 = nnx.List([_activation(cfg, channels) for _ in dilations])
        self.acts2 = nnx.List([_activation(cfg, channels) for _ in dilations])

    @scopes.module_scope
    def __call__(self, x_bnc: jax.Array) -> jax.Array:
        for act1, conv1, act2, conv2 in zip(self.acts1, self.convs1, self.acts2, self.convs2, strict=True):
            x_bnc = x_bnc + conv2(act2(conv1(act1(x_bnc))))
        return x_bnc


def _mel_to_bnc(mel: jax.Array, time_last: bool) -> jax.Array:
    """``[B, C, T, M]`` (or ``[B, C, M, T]``) -> ``[B, T, C*M]``, channel index ``c*M + m`` as diffusers flattens."""
    if mel.ndim != 4:
        raise ValueError(f"expected a [B, C, T, M] mel spectrogram, got shape {mel.shape}")
    x = mel if time_last else jnp.swapaxes(mel, 2, 3)  # [B, C, M, T]
    b, c, m, t = x.shape
    return jnp.moveaxis(x.reshape(b, c * m, t), 1, -1)


class LTX2Vocoder(nnx.Module):
    """diffusers ``LTX2Vocoder``: mel ``[B, 2, T, M]`` (``in_channels = 2M``) -> waveform
    ``[B, out_channels, T * prod(upsample_factors)]``.

    ``conv_in`` (k=7); per stage: leaky_relu(slope) (leaky_relu variant only) -> ``ConvTranspose1d``
    (channels halve, padding ``(k-s)//2``) -> mean of the stage's ResBlocks; then ``act_out``
    (``LeakyReLU()`` with torch's *default* slope 0.01, as the original; anti-aliased SnakeBeta for
    snake variants) -> ``conv_out`` (k=7) -> tanh / clamp / nothing.
    """

    def __init__(self, cfg: VocoderConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, VocoderConfig):
            raise TypeError(f"LTX2Vocoder needs a VocoderConfig, got {type(cfg).__name__}")
        cfg.validate()
        self.cfg = cfg
        dtype = jnp.dtype(cfg.dtype)
        self.conv_in = Conv1d(cfg.in_channels, cfg.hidden_channels, 7, pads=((3, 3),), dtype=dtype, rngs=rngs)
        ups, resnets, ch = [], [], cfg.hidden_channels
        for s, k in zip(cfg.upsample_factors, cfg.upsample_kernel_sizes, strict=True):
            ups.append(ConvTranspose1d(ch, ch // 2, k, s, (k - s) // 2, dtype=dtype, rngs=rngs))
            ch //= 2
            resnets += [
                ResBlock(cfg, ch, rk, d, rngs=rngs)
                for rk, d in zip(cfg.resnet_kernel_sizes, cfg.resnet_dilations, strict=True)
            ]
        self.upsamplers = nnx.List(ups)
        self.resnets = nnx.List(resnets)  # stage i owns resnets[i*R : (i+1)*R], R = len(resnet_kernel_sizes)
        self.act_out = (
            LeakyReLU(0.01)
            if cfg.act_fn == "leaky_relu"
            else AntiAliasAct1d(
                SnakeBeta(ch, use_beta=True, dtype=dtype), cfg.antialias_ratio, cfg.antialias_kernel_size
            )
        )
        self.conv_out = Conv1d(ch, cfg.out_channels, 7, pads=((3, 3),), use_bias=cfg.final_bias, dtype=dtype, rngs=rngs)
        scopes.label(self, {**scopes.VOCODER_CHILDREN, "upsamplers": scopes.STAGE})
        scopes.label(self, {"resnets": scopes.STAGE}, group=len(cfg.resnet_kernel_sizes))

    @scopes.scoped(scopes.VOCODER)
    def generate(self, x_bnc: jax.Array) -> jax.Array:
        """Channels-last core: ``[B, T, in_channels] -> [B, T * prod(upsample_factors), out_channels]``."""
        cfg, r = self.cfg, len(self.cfg.resnet_kernel_sizes)
        x = self.conv_in(x_bnc.astype(jnp.dtype(cfg.dtype)))
        for i, up in enumerate(self.upsamplers):
            if cfg.act_fn == "leaky_relu":
                x = jax.nn.leaky_relu(x, cfg.leaky_relu_negative_slope)
            x = up(x)
            acc = self.resnets[i * r](x)
            for j in range(i * r + 1, (i + 1) * r):
                acc = acc + self.resnets[j](x)
            x = acc / r
            x = constrain(x, _ACT, cfg.sharding)
        x = self.conv_out(self.act_out(x))
        if cfg.final_act_fn == "tanh":
            return jnp.tanh(x)
        return jnp.clip(x, -1.0, 1.0) if cfg.final_act_fn == "clamp" else x

    def __call__(self, mel: jax.Array, *, time_last: bool = False) -> jax.Array:
        """mel ``[B, 2, T, M]`` (``[B, 2, M, T]`` with ``time_last``) -> waveform ``[B, out_channels, N]``."""
        return jnp.moveaxis(self.generate(_mel_to_bnc(mel, time_last)), -1, 1)


class CausalSTFT(nnx.Module):
    """``CausalSTFT``: left-pad ``window - hop`` zeros, project on the windowed DFT basis with stride
    ``hop``. ``forward_basis`` (``[L, 1, 2F]``, torch ``[2F, 1, L]``) is a checkpoint buffer (zeros at init)."""

    def __init__(self, cfg: VocoderWithBWEConfig):
        self.hop, self.left = cfg.hop_length, max(0, cfg.window_length - cfg.hop_length)
        n_freqs = cfg.filter_length // 2 + 1
        self.forward_basis = buffer(jnp.zeros((cfg.filter_length, 1, 2 * n_freqs), jnp.float32), (None, None, None))

    def __call__(self, wave_bn: jax.Array) -> jax.Array:
        """Waveforms ``[B, N] -> magnitude [B, frames, F]``."""
        x = pad(wave_bn[..., None], ((self.left, 0),))
        spec = jax.lax.conv_general_dilated(
            x, self.forward_basis[...].astype(x.dtype), (self.hop,), "VALID", dimension_numbers=("NWC", "WIO", "NWC")
        )
        real, imag = jnp.split(spec, 2, axis=-1)
        return jnp.sqrt(real**2 + imag**2)


class MelSTFT(nnx.Module):
    """``MelSTFT``: causal log-mel spectrogram; ``mel_basis [n_mel, F]`` is a checkpoint buffer."""

    def __init__(self, cfg: VocoderWithBWEConfig):
        self.stft_fn = CausalSTFT(cfg)
        n_freqs = cfg.filter_length // 2 + 1
        self.mel_basis = buffer(jnp.zeros((cfg.num_mel_channels, n_freqs), jnp.float32), (None, None))

    def __call__(self, wave_bn: jax.Array) -> jax.Array:
        """Waveforms ``[B, N] -> log-mel [B, frames, n_mel]``."""
        mag = self.stft_fn(wave_bn)
        mel = jnp.einsum("bfk,mk->bfm", mag, self.mel_basis[...].astype(mag.dtype))
        return jnp.log(jnp.maximum(mel, 1e-5))


class LTX2VocoderWithBWE(nnx.Module):
    """diffusers ``LTX2VocoderWithBWE`` (LTX-2.3): mel ``[B, 2, T, M]`` -> 48 kHz waveform
    ``[B, 2, T * prod(upsample_factors) * ratio]``, ``ratio = output/input sampling rate``.

    Stage-1 ``vocoder`` makes a 16 kHz waveform ``x``; its causal log-mel (``mel_stft``) feeds the
    ``bwe_generator``, whose output is a residual over the Hann-sinc resampled ``x``; the sum is
    clamped to [-1, 1]."""

    def __init__(self, cfg: VocoderWithBWEConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, VocoderWithBWEConfig):
            raise TypeError(f"LTX2VocoderWithBWE needs a VocoderWithBWEConfig, got {type(cfg).__name__}")
        cfg.validate()
        self.cfg = cfg
        self.vocoder = LTX2Vocoder(cfg.vocoder(), rngs=rngs)
        self.bwe_generator = LTX2Vocoder(cfg.bwe(), rngs=rngs)
        self.mel_stft = MelSTFT(cfg)

    def __call__(self, mel: jax.Array) -> jax.Array:
        """mel ``[B, 2, T, M]`` -> waveform ``[B, out_channels, N * ratio]`` with ``N = T * prod(upsample_factors)``."""
        cfg = self.cfg
        x_bnc = self.vocoder.generate(_mel_to_bnc(mel, False))
        b, n, c = x_bnc.shape
        x_bnc = pad(x_bnc, ((0, -n % cfg.hop_length),))  # whole STFT hops
        wave_bn = jnp.moveaxis(x_bnc, -1, 1).reshape(b * c, -1)
        logmel = self.mel_stft(wave_bn)  # [B*C, frames, n_mel]
        frames = logmel.shape[1]
        logmel = jnp.transpose(logmel.reshape(b, c, frames, -1), (0, 2, 1, 3)).reshape(b, frames, -1)
        residual = self.bwe_generator.generate(logmel)
        # The Hann-sinc resampler is no checkpoint buffer (persistent=False): a constant of the config.
        r = cfg.resample_ratio
        taps = hann_sinc_filter(r)
        width = (taps.shape[0] - 1) // (2 * r)
        skip = upsample_1d(x_bnc, jnp.asarray(taps), r, width, (2 * width * r, taps.shape[0] - r))
        wave = jnp.clip(residual + skip, -1.0, 1.0)[:, : n * cfg.resample_ratio]
        return jnp.moveaxis(wave, -1, 1)


__all__ = [
    "LTX2Vocoder",
    "LTX2VocoderWithBWE",
    "VocoderConfig",
    "VocoderWithBWEConfig",
]
