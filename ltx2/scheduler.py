"""Flow-matching Euler sampler as pure functions (diffusers ``FlowMatchEulerDiscreteScheduler``).

The schedule depends only on static numbers (step count, token count), so it is computed once
on the host with numpy in float32, operation for operation as diffusers does it: ``sigmas =
linspace(1, 1/N, N)``, a time shift (dynamic: ``exp(mu) / (exp(mu) + (1/t - 1))``, with ``mu``
linear in the video token count; static: ``shift*t / (1 + (shift-1)*t)``), an optional stretch
so that the last sigma equals ``shift_terminal``, then a final 0. Timesteps are ``sigma * 1000``.
The step itself is ``x + (sigma_next - sigma) * v`` on device and takes traced sigmas, so a
whole denoising loop can be one compiled program.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ltx2 import scopes

TIME_SHIFT_TYPES = ("exponential", "linear")


@dataclass(frozen=True)
class SchedulerConfig:
    """``FlowMatchEulerDiscreteScheduler`` settings we support (diffusers names and defaults)."""

    num_train_timesteps: int = 1000
    shift: float = 1.0
    use_dynamic_shifting: bool = False
    base_shift: float = 0.5
    max_shift: float = 1.15
    base_image_seq_len: int = 256
    max_image_seq_len: int = 4096
    shift_terminal: float | None = None
    time_shift_type: str = "exponential"

    def __post_init__(self) -> None:
        if self.time_shift_type not in TIME_SHIFT_TYPES:
            raise ValueError(
                f"SchedulerConfig.time_shift_type={self.time_shift_type!r}: must be one of {TIME_SHIFT_TYPES}"
            )
        if self.shift_terminal is not None and not 0.0 <= self.shift_terminal < 1.0:
            raise ValueError(f"SchedulerConfig.shift_terminal={self.shift_terminal!r}: must be in [0, 1)")
        if self.max_image_seq_len == self.base_image_seq_len:
            raise ValueError(
                f"SchedulerConfig.max_image_seq_len={self.max_image_seq_len}: must differ "
                f"from base_image_seq_len for the shift to be defined"
            )

    @classmethod
    def dev(cls, **overrides: Any) -> SchedulerConfig:
        """LTX-2 "dev" checkpoint: dynamic exponential shift 0.95..2.05 over 1024..4096 tokens,
        stretched to end at 0.1 (diffusers converter)."""
        base = dict(
            use_dynamic_shifting=True,
            base_shift=0.95,
            max_shift=2.05,
            base_image_seq_len=1024,
            max_image_seq_len=4096,
            shift_terminal=0.1,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def distilled(cls, **overrides: Any) -> SchedulerConfig:
        """LTX-2 distilled checkpoint: the same numbers, no dynamic shift, no terminal stretch."""
        return cls.dev(**{"use_dynamic_shifting": False, "shift_terminal": None, **overrides})

    def mu(self, image_seq_len: int) -> float:
        """The pipeline's ``mu`` for ``image_seq_len`` video tokens."""
        return calculate_shift(
            image_seq_len, self.base_image_seq_len, self.max_image_seq_len, self.base_shift, self.max_shift
        )

    def replace(self, **changes: Any) -> SchedulerConfig:
        return dataclasses.replace(self, **changes)


def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """``mu``, linear in the token count (diffusers ``calculate_shift``, from Flux)."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    return image_seq_len * m + b


def time_shift(cfg: SchedulerConfig, mu: float, t: np.ndarray) -> np.ndarray:
    """Resolution-dependent shift of float32 ``t`` (sigma exponent 1.0, as diffusers calls it)."""
    if cfg.time_shift_type == "exponential":
        return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** 1.0)
    return mu / (mu + (1 / t - 1) ** 1.0)


def stretch_to_terminal(t: np.ndarray, shift_terminal: float) -> np.ndarray:
    """Stretch ``t`` so that it ends at ``shift_terminal`` (LTX-Video ``rf.py``)."""
    one_minus_z = 1 - t
    scale_factor = one_minus_z[-1] / (1 - shift_terminal)
    return 1 - (one_minus_z / scale_factor)


def sigma_schedule(
    cfg: SchedulerConfig,
    num_steps: int | None = None,
    *,
    mu: float | None = None,
    sigmas: Sequence[float] | np.ndarray | None = None,
) -> np.ndarray:
    """float32 sigmas ``[N + 1]`` ending in 0, from ``linspace(1, 1/N, N)`` (the pipeline's
    default) or the given ``sigmas``; ``mu`` is required with dynamic shifting."""
    if sigmas is None:
        if num_steps is None or num_steps <= 0:
            raise ValueError(f"num_steps must be a positive integer when no sigmas are given, got {num_steps}")
        sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
    elif num_steps is not None and len(sigmas) != num_steps:
        raise ValueError(f"{len(sigmas)} sigmas given for num_steps={num_steps}")
    s = np.array(sigmas).astype(np.float32)
    if cfg.use_dynamic_shifting:
        if mu is None:
            raise ValueError("mu is required when use_dynamic_shifting is True (see SchedulerConfig.mu)")
        s = time_shift(cfg, mu, s)
    else:
        s = cfg.shift * s / (1 + (cfg.shift - 1) * s)
    if cfg.shift_terminal:
        s = stretch_to_terminal(s, cfg.shift_terminal)
    return np.concatenate([s.astype(np.float32), np.zeros(1, np.float32)])


def timesteps(cfg: SchedulerConfig, sigmas: np.ndarray) -> np.ndarray:
    """Model timesteps ``[N]`` (``sigma * num_train_timesteps``) of a schedule from :func:`sigma_schedule`."""
    return (sigmas[:-1] * np.float32(cfg.num_train_timesteps)).astype(np.float32)


@scopes.scoped(scopes.SCHEDULER)
def step(sample: jax.Array, velocity: jax.Array, sigma: jax.Array, sigma_next: jax.Array) -> jax.Array:
    """One Euler step ``x + (sigma_next - sigma) * v`` (in float32, returned in ``velocity``'s
    dtype, like diffusers ``step``)."""
    dt = jnp.asarray(sigma_next, jnp.float32) - jnp.asarray(sigma, jnp.float32)
    return (sample.astype(jnp.float32) + dt * velocity).astype(velocity.dtype)


# diffusers options that select other samplers than this one: supported only at these values.
_FIXED: dict[str, Any] = {
    "invert_sigmas": False,
    "use_karras_sigmas": False,
    "use_exponential_sigmas": False,
    "use_beta_sigmas": False,
    "stochastic_sampling": False,
}


def config_from_diffusers(config: Mapping[str, Any]) -> SchedulerConfig:
    """``FlowMatchEulerDiscreteScheduler.config`` -> :class:`SchedulerConfig`; unsupported keys
    or values raise ValueError naming the key."""
    fields = {f.name for f in dataclasses.fields(SchedulerConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in config.items():
        if key.startswith("_"):
            continue
        if key in _FIXED:
            if value != _FIXED[key]:
                raise ValueError(f"scheduler config {key}={value!r} is not supported (only {_FIXED[key]!r})")
        elif key in fields:
            kwargs[key] = value
        else:
            raise ValueError(f"scheduler config key {key!r} is not supported by SchedulerConfig")
    return SchedulerConfig(**kwargs)
