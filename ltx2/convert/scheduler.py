"""diffusers ``FlowMatchEulerDiscreteScheduler`` -> :class:`ltx2.scheduler.SchedulerConfig`.

A scheduler has no weights: conversion reads its config (every key known, samplers other than
plain Euler rejected by name) and the pure functions in :mod:`ltx2.scheduler` do the rest.
"""

from __future__ import annotations

from typing import Any

from ltx2.scheduler import SchedulerConfig, config_from_diffusers


def from_diffusers(scheduler: Any) -> SchedulerConfig:
    """The :class:`SchedulerConfig` equivalent of a diffusers ``FlowMatchEulerDiscreteScheduler``."""
    return config_from_diffusers(scheduler.config)
