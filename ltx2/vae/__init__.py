"""Autoencoders and vocoder: video VAE, audio VAE, vocoder, latent upsampler."""

from ltx2.vae.conv import CausalConv3d as CausalConv3d
from ltx2.vae.conv import Conv as Conv
from ltx2.vae.video import VideoVAE as VideoVAE
from ltx2.vae.video import VideoVAEConfig as VideoVAEConfig
from ltx2.vae.video import mix_decode_noise as mix_decode_noise
