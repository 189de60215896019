"""Flow-match Euler: schedules and full sampling loops equal diffusers'
``FlowMatchEulerDiscreteScheduler`` (schedules to FP32_ELEMENTWISE, an N-step loop to N more
roundings); config conversion and errors."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltx2.convert import from_diffusers
from ltx2.scheduler import SchedulerConfig, calculate_shift, sigma_schedule, step, timesteps
from tests.tolerances import EPS32, FP32_ELEMENTWISE

TOL = FP32_ELEMENTWISE  # sigma / timestep formulas: a few float32 ops each
CONFIGS = {
    "dev": SchedulerConfig.dev(),
    "distilled": SchedulerConfig.distilled(),
    "static-shift-3": SchedulerConfig(shift=3.0, shift_terminal=0.05),
    "linear-shift": SchedulerConfig.dev(time_shift_type="linear"),
}
VIDEO_TOKENS = 3000  # between base (1024) and max (4096) image_seq_len


@pytest.fixture(scope="module")
def reference() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift as reference_shift

    return FlowMatchEulerDiscreteScheduler, reference_shift


def reference_scheduler(reference: Any, cfg: SchedulerConfig) -> Any:
    cls = reference[0]
    return cls(**{k: v for k, v in vars(cfg).items()})


def error(ours: Any, ref: Any) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(ours, np.float64) - ref)) / max(1.0, np.max(np.abs(ref))))


@jax.jit
def sample_loop(x: jax.Array, velocities: jax.Array, sigmas: jax.Array) -> jax.Array:
    def body(x: jax.Array, inputs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        v, sigma, sigma_next = inputs
        x = step(x, v, sigma, sigma_next)
        return x, x

    return jax.lax.scan(body, x, (velocities, sigmas[:-1], sigmas[1:]))[1]


@pytest.mark.parity
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("num_steps", [2, 8, 40])
def test_schedule_and_loop_match_diffusers(reference: Any, name: str, num_steps: int) -> None:
    import torch

    cfg = CONFIGS[name]
    mu = cfg.mu(VIDEO_TOKENS)
    ref = reference_scheduler(reference, cfg)
    ref.set_timesteps(sigmas=np.linspace(1.0, 1 / num_steps, num_steps), mu=mu)
    sigmas = sigma_schedule(cfg, num_steps, mu=mu)
    ts = timesteps(cfg, sigmas)

    rng = np.random.default_rng(num_steps)
    x0 = rng.normal(size=(2, 8, 4)).astype(np.float32)
    velocities = rng.normal(size=(num_steps, 2, 8, 4)).astype(np.float32)
    ref_x, ref_trajectory = torch.from_numpy(x0), []
    for t, v in zip(ref.timesteps, velocities, strict=True):
        ref_x = ref.step(torch.from_numpy(v), t, ref_x, return_dict=False)[0]
        ref_trajectory.append(ref_x.numpy())
    ours = sample_loop(jnp.asarray(x0), jnp.asarray(velocities), jnp.asarray(sigmas))

    errors = {
        "sigmas": error(sigmas, ref.sigmas.numpy()),
        "timesteps": error(ts, ref.timesteps.numpy()),
        "samples": error(ours, np.stack(ref_trajectory)),
    }
    print(f"scheduler {name} N={num_steps}: {errors}")
    assert sigmas.shape == (num_steps + 1,) and sigmas[-1] == 0.0
    assert max(errors["sigmas"], errors["timesteps"]) <= TOL
    # Each Euler step x + (sigma' - sigma) v may round once differently (XLA may fuse an FMA), and the
    # difference is carried: <= one EPS32 of the scaled metric per step on top of the schedule's.
    assert errors["samples"] <= TOL + num_steps * EPS32


@pytest.mark.parity
def test_calculate_shift_matches_pipeline(reference: Any) -> None:
    for tokens in (8, 1024, 3000, 4096, 9000):
        args = (tokens, 1024, 4096, 0.95, 2.05)
        assert calculate_shift(*args) == reference[1](*args)
    assert SchedulerConfig.dev().mu(3000) == calculate_shift(3000, 1024, 4096, 0.95, 2.05)


def test_known_two_step_dev_schedule() -> None:
    """The reference's verified 2-step schedule at 8 video tokens."""
    cfg = SchedulerConfig.dev()
    sigmas = sigma_schedule(cfg, 2, mu=cfg.mu(8))
    np.testing.assert_allclose(sigmas, [1.0, 0.1, 0.0], atol=TOL)
    np.testing.assert_allclose(timesteps(cfg, sigmas), [1000.0, 100.0], atol=1000 * TOL)  # sigma * 1000


def test_custom_sigmas_and_errors() -> None:
    cfg = SchedulerConfig.distilled()
    np.testing.assert_array_equal(sigma_schedule(cfg, sigmas=[1.0, 0.5, 0.25]), np.float32([1.0, 0.5, 0.25, 0.0]))
    with pytest.raises(ValueError, match="mu is required"):
        sigma_schedule(SchedulerConfig.dev(), 4)
    with pytest.raises(ValueError, match="3 sigmas given for num_steps=4"):
        sigma_schedule(cfg, 4, sigmas=[1.0, 0.5, 0.25])
    with pytest.raises(ValueError, match="time_shift_type"):
        SchedulerConfig(time_shift_type="cubic")


def test_step_keeps_velocity_dtype() -> None:
    x = jnp.ones((2, 3), jnp.bfloat16)
    out = step(x, jnp.full((2, 3), 2.0, jnp.bfloat16), jnp.float32(1.0), jnp.float32(0.5))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out, np.float32), 0.0)


@pytest.mark.parity
def test_from_diffusers(reference: Any) -> None:
    cls = reference[0]
    for cfg in (SchedulerConfig.dev(), SchedulerConfig.distilled()):
        assert from_diffusers(reference_scheduler(reference, cfg)) == cfg
    with pytest.raises(ValueError, match="invert_sigmas"):
        from_diffusers(cls(invert_sigmas=True))
