"""LTX-2 audio+video diffusion in JAX (Flax NNX)."""

from ltx2.config import TransformerConfig
from ltx2.transformer import LTX2Transformer

__all__ = ["LTX2Transformer", "TransformerConfig"]
