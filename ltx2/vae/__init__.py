"""Autoencoders and vocoder: video VAE, audio VAE, vocoder, latent upsampler."""

from ltx2.vae.audio import AudioVAEConfig as AudioVAEConfig
from ltx2.vae.audio import AutoencoderKLLTX2Audio as AutoencoderKLLTX2Audio
from ltx2.vae.audio import pack_latents as pack_latents
from ltx2.vae.audio import unpack_latents as unpack_latents
from ltx2.vae.conv import CausalConv3d as CausalConv3d
from ltx2.vae.conv import Conv as Conv
from ltx2.vae.upsampler import LatentUpsamplerConfig as LatentUpsamplerConfig
from ltx2.vae.upsampler import LTX2LatentUpsamplerModel as LTX2LatentUpsamplerModel
from ltx2.vae.video import VideoVAE as VideoVAE
from ltx2.vae.video import VideoVAEConfig as VideoVAEConfig
from ltx2.vae.video import mix_decode_noise as mix_decode_noise
from ltx2.vae.vocoder import LTX2Vocoder as LTX2Vocoder
from ltx2.vae.vocoder import LTX2VocoderWithBWE as LTX2VocoderWithBWE
from ltx2.vae.vocoder import VocoderConfig as VocoderConfig
from ltx2.vae.vocoder import VocoderWithBWEConfig as VocoderWithBWEConfig
