"""Known answers of the analytic estimate (the cost that orders the search's candidates), worked by
hand from a one-parameter model, and of the rank agreement the search reports for it."""

from __future__ import annotations

import math

import pytest

from harness.search.analytic import Hardware, estimate
from harness.search.facts import ArraySig, ModelFacts
from harness.search.output import rank_agreement
from harness.search.space import Candidate

MESH = (("data", 2), ("context", 2), ("tensor", 2))
# One (embed, mlp) weight of 4 x 8 bf16 (64 bytes); 10 video tokens of width 4, batch 1, 2 blocks.
FACTS = ModelFacts(
    base="replicated",
    arrays=(ArraySig("param", ("embed", "mlp"), (4, 8), itemsize=2),),
    forward_flops=8e6,
    num_layers=2,
    video_tokens=10,
    audio_tokens=0,
    batch=1,
    inner_dim=4,
    audio_inner_dim=4,
    act_itemsize=2,
)
HW = Hardware(peak_flops=1e6, link_bytes_per_s=100.0, hbm_bytes=None, hbm_bytes_per_s=400.0)
# Activations: 1 x 10 x 4 x 2 bytes = 80. Logits of one block: 4 passes x 4 bytes x 10 x 10 x 1 head = 1600.
SPLIT = (
    ("activation_batch", ("data",)),
    ("activation_length", ("context",)),
    ("embed", ("data",)),
    ("mlp", ("tensor",)),
)


def test_a_replicated_layout_costs_the_whole_forward_and_its_logits_on_one_device() -> None:
    est = estimate(FACTS, Candidate(MESH, "xla", ()), HW)
    assert est.compute_s == pytest.approx(8.0)  # 8e6 FLOPs at 1e6 FLOP/s, nothing split
    assert est.collective_bytes == 0.0  # nothing sharded: nothing gathered or reduced
    assert est.logits_bytes == pytest.approx(3200.0)  # 1600 per block, 2 blocks
    assert est.weight_bytes == pytest.approx(64.0)
    assert est.step_s == pytest.approx(8.0 + 3200.0 / 400.0)


def test_a_split_layout_pays_for_its_gathers_reductions_and_key_values() -> None:
    est = estimate(FACTS, Candidate(MESH, "xla", SPLIT), HW)
    # batch over data, tokens over context, FFN hidden over tensor: the work splits 8 ways.
    assert est.compute_s == pytest.approx(1.0)
    # FSDP: the weight, sharded over data (which splits the batch), is gathered: 64 x (1 - 1/2) = 32.
    # Partial sums: 4 per block x 80 / 4 (data shards) x 2 (2 - 1) / 2 x 2 blocks = 160.
    # Keys and values: 2 x 80 / 8 x (2 - 1) context shards x 2 blocks = 40.
    assert est.collective_bytes == pytest.approx(32.0 + 160.0 + 40.0)
    assert est.logits_bytes == pytest.approx(3200.0 / 8)
    assert est.weight_bytes == pytest.approx(64.0 / 4)  # embed over data, mlp over tensor
    assert est.step_s == pytest.approx(1.0 + 232.0 / 100.0 + 400.0 / 400.0)


def test_splash_keeps_the_logits_on_chip() -> None:
    xla, splash = (estimate(FACTS, Candidate(MESH, kernel, SPLIT), HW) for kernel in ("xla", "splash"))
    assert splash.logits_bytes == 0.0
    assert xla.step_s - splash.step_s == pytest.approx(400.0 / 400.0)


def _row(analytic: float | None, step: float | None, status: str = "ok") -> dict[str, object]:
    return {"analytic_step_s": analytic, "step_s": step, "status": status}


def test_rank_agreement_is_spearman_over_the_compiled_rows_with_both_steps() -> None:
    table = [_row(1, 10), _row(2, 20), _row(3, 40), _row(4, 30), _row(5, None), _row(None, 5), _row(6, 1, "failed")]
    got = rank_agreement(table)
    assert got["pairs"] == 4
    assert got["spearman"] == pytest.approx(1 - 6 * 2 / (4 * (4**2 - 1)))  # rank differences 0, 0, 1, 1
    assert rank_agreement([_row(1, 3), _row(2, 2), _row(3, 1)]) == {"spearman": pytest.approx(-1.0), "pairs": 3}


def test_rank_agreement_below_three_rows_is_unknown() -> None:
    assert rank_agreement([_row(1, 1), _row(2, 2)]) == {"spearman": None, "pairs": 2}
    assert rank_agreement([]) == {"spearman": None, "pairs": 0}
    assert not math.isnan(rank_agreement([_row(1, 1), _row(2, 2), _row(3, 3)])["spearman"])
