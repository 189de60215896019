"""LTX-2 audio+video diffusion in JAX (Flax NNX)."""
