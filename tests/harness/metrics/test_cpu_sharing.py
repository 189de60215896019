"""The CPU calibration's model of the host's cores: the matmul sharing curve measured alone and
with several devices at once, the copy's tasks read from its compiled program, and the spec."""

from __future__ import annotations

import jax
import pytest

from harness.metrics.timeline import cpu_calibrate, pricing


def test_share_curve_times_each_size_alone_and_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_calibrate, "SHARE_MM_SIZES", (8, 64))
    monkeypatch.setattr(cpu_calibrate, "SHARE_LINKS", 4)
    devices = jax.local_devices()
    assert len(devices) >= 2, "the tests run with 8 simulated devices (conftest)"
    curve = cpu_calibrate._share_curve(devices[:2], repeats=3)
    assert [n for n, _ in curve] == [8, 64]
    # two devices on the host's cores: each op at most as fast as alone (timing noise aside), never free
    for _, ratio in curve:
        assert 0.0 < ratio < 2.0


def test_the_copys_tasks_are_read_from_its_compiled_program() -> None:
    """XLA:CPU splits a large elementwise loop over the intra-op pool and leaves a tiny one whole."""
    add = jax.jit(lambda v: v + 1.0)
    big = cpu_calibrate.program_tasks(add, jax.numpy.ones((1 << 22,), jax.numpy.float32))
    small = cpu_calibrate.program_tasks(add, jax.numpy.ones((8,), jax.numpy.float32))
    assert small == 1
    assert big >= min(cpu_calibrate.host_cores(), 2) or cpu_calibrate.host_cores() == 1


def _calibration(**kw: object) -> cpu_calibrate.CpuCalibration:
    base = dict(
        devices=8,
        cores=2,
        single={"matmul_flops_per_s": 20e9, "copy_bytes_per_s": 2e9, "op_overhead_s": 2e-6},
        share_mm=((32, 0.25), (1024, 0.125)),
        copy_cores=2,
    )
    base.update(kw)
    return cpu_calibrate.CpuCalibration(2e9, 0.5e9, 6e-6, "test: fixed numbers", **base)  # type: ignore[arg-type]


def test_a_calibration_of_the_cores_prices_ops_from_one_devices_rates() -> None:
    spec = _calibration().spec()
    assert pricing.shared(spec) and spec.value("host_cores") == 2
    assert spec.value("peak_flops_per_s") == 20e9  # one device alone
    assert spec.value("hbm_bytes_per_s") == 1e9  # the copy ran on 2 cores: 1 GB/s per core
    assert spec.value("op_overhead_s") == 6e-6  # measured with the devices at once
    # 1 MB: a quarter core per device (2 cores, 8 devices) -> 4 ms, split or not
    assert pricing.memory_seconds(1e6, spec, 1) == pytest.approx(4e-3)
    assert pricing.memory_seconds(1e6, spec, 2) == pytest.approx(4e-3)
    one = cpu_calibrate.CpuCalibration(20e9, 2e9, 2e-6, "test", devices=1, cores=2, copy_cores=2)
    assert one.per_op_sharing and one.spec().value("hbm_bytes_per_s") == 1e9
    assert pricing.memory_seconds(1e6, one.spec(), 2) == pytest.approx(0.5e-3)  # alone, split in 2


def test_a_calibration_written_before_the_cores_were_modelled_keeps_its_rates() -> None:
    raw = {k: v for k, v in _calibration().to_dict().items() if k not in ("share_mm", "copy_cores")}
    old = cpu_calibrate.CpuCalibration.from_dict(raw)
    assert not old.per_op_sharing and not pricing.shared(old.spec())
    assert old.spec().value("hbm_bytes_per_s") == 0.5e9
    again = cpu_calibrate.CpuCalibration.from_dict(_calibration().to_dict())
    assert again == _calibration()
