"""What a user reads: the sweep's closing table keeps names whole within 120 columns, a compile-only
stage over the device's memory reads ``does-not-fit`` everywhere (record, console, page, CSV, gate),
and numbers carry a scaled unit with the exact value in the page's tooltip."""

from __future__ import annotations

import csv
from typing import Any

from harness.fmt import fmt_bytes, fmt_exact, fmt_flops, fmt_html, fmt_num, fmt_time
from harness.report import write_report
from harness.report.console import WIDTH, summary_table
from harness.report.static_text import format_static
from harness.results import gate as gating
from harness.results.record import DOES_NOT_FIT
from tests.harness.fixtures import synthetic

GiB = 2**30
# The v6e manifest's variant names (the table once clipped twelve of them to `trilli~`).
V6E_NAMES = [
    "replicated",
    "naive",
    "naive-ffn-fixed",
    "naive-ffn-qkv-fixed",
    "context",
    "trillium",
    "ironwood",
    "trillium-unrolled",
    "trillium-fp32-params",
    "trillium-splash",
    "ironwood-splash",
    "trillium-guided",
    "trillium-guided-sequential",
    "trillium-guided-no-fork",
    "trillium-guided-no-text-kv",
    "trillium-guided-old",
    "trillium-guided-22b",
    "trillium-async",
    "trillium-async-splash",
    "trillium-22b-splash-async-collectives-everywhere",
    "pipeline-python-loop",
]


def compile_only(name: str, needed: float, status: str = "ok", flops: float = 71982003847168.0) -> dict[str, Any]:
    """A compile-only TPU record of one denoise_step needing ``needed`` bytes per device of 32 GiB. With
    ``status`` "ok" and ``needed`` over 32 GiB it is a record as written before the worker said so."""
    fits = needed <= 32 * GiB
    target = {
        "fits": fits,
        "memory": {"needed_bytes": needed, "hbm_bytes": 32 * GiB, "argument_bytes": needed / 2, "temp_bytes": 1e9},
        "flops_per_device": flops,
        "calls_per_video": 40,
        "roofline": {"step_s": 0.41, "bound_by": "compute"},
        "roofline_per_video_s": 16.4,
        "spec": {"device_kind": "TPU v6 lite"},
    }
    static = {
        "memory": {"bound_bytes": needed, "peak_bytes": needed},
        "timing": {"compile_seconds": 95.0},
        "target": target,
    }
    raw = synthetic.minimal(name, {"denoise_step": {"status": status, "static": static}})
    raw["target"].update(platform="tpu", mode="compile", mode_used="compile", topology="v6e:2x4", devices=8)
    return raw


def test_console_keeps_every_v6e_name_whole_within_120_columns():
    raw = [compile_only(n, 60 * GiB if n == "replicated" else 20 * GiB) for n in V6E_NAMES]
    text = summary_table(synthetic.records(raw))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, text
    assert "~" not in text
    names = [line.split("  ")[0].strip() for line in lines[2:]]
    assert names == V6E_NAMES  # compile-only: the empty measured columns leave room for every name
    replicated = next(line for line in lines if line.startswith("replicated "))
    assert " does-not-fit " in replicated and "60 GiB" in replicated
    assert "1.58 min" not in text and "95 s" in next(line for line in lines if line.startswith("naive "))


def test_console_wraps_a_long_name_and_names_the_dropped_columns():
    raw = synthetic.load("sweep_cpu8.jsonl")
    raw[0]["variant"]["name"] = "a-very-long-variant-name-that-would-push-the-table-past-its-width"
    lines = summary_table(synthetic.records(raw)).splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[2].startswith("a-very-long-variant-name-that-would-  ")
    assert lines[3].rstrip() == "push-the-table-past-its-width"
    assert lines[-1].startswith("(columns left out for width:")


def test_an_old_record_over_the_device_memory_reads_does_not_fit_everywhere(tmp_path):
    raw = [compile_only("fits", 20 * GiB), compile_only("replicated", 60 * GiB)]  # both stage status "ok"
    records = synthetic.records(raw)
    assert [r.stages["denoise_step"].verdict for r in records] == ["ok", DOES_NOT_FIT]
    assert records[1].stages["denoise_step"].status == "ok"  # the record itself is read as written
    files = write_report(records, tmp_path)
    page = files.index.read_text()
    assert '<td class="l status-does-not-fit">does-not-fit</td>' in page
    assert "replicated / denoise_step" in page and "needs 60 GiB per device, the target has 32 GiB" in page
    rows = list(csv.DictReader(files.csv.read_text().splitlines()))
    assert {r["variant"]: r["stage_status"] for r in rows if r["stage"]} == {"fits": "ok", "replicated": DOES_NOT_FIT}


def test_the_gate_fails_a_variant_that_fit_and_does_not_now():
    before = synthetic.records([compile_only("v", 20 * GiB)])
    after = synthetic.records([compile_only("v", 60 * GiB, status=DOES_NOT_FIT)])
    result = gating.evaluate(before, after)
    assert result.exit_code == gating.REGRESSION, result.lines()
    assert {c.metric for c in result.failures} >= {"does_not_fit"}
    assert gating.evaluate(after, before).exit_code == gating.CLEAN  # fitting again is no regression


def test_a_measured_stage_that_no_longer_fits_is_a_regression_not_missing_data():
    measured = {"samples_s": [0.01] * 12, "wall_s": {"n": 12, "median": 0.01}}
    fit = {"fits": True, "needed_bytes": 1e9, "available_bytes": 2e9, "source": "the device"}
    before = synthetic.minimal("v", {"s": {"measured": measured, "memory_fit": fit}})
    after = synthetic.minimal(
        "v", {"s": {"status": DOES_NOT_FIT, "error": "does not fit", "memory_fit": {**fit, "fits": False}}}
    )
    result = gating.evaluate(synthetic.records([before]), synthetic.records([after]))
    assert result.exit_code == gating.REGRESSION and not result.problems, result.lines()
    assert [c.metric for c in result.failures] == ["does_not_fit"]


def test_numbers_carry_scaled_units_and_the_exact_value_in_a_tooltip():
    assert fmt_flops(71982003847168) == "72 TFLOP"
    assert fmt_bytes(60 * GiB) == "60 GiB" and fmt_time(0.0004) == "400 us" and fmt_time(95.0) == "95 s"
    assert fmt_num(12) == "12" and fmt_num(2.5e7) == "25 M"
    assert fmt_exact(71982003847168, "flops") == "71982003847168 FLOP"
    assert fmt_html(71982003847168, "flops") == '<span title="71982003847168 FLOP">72 TFLOP</span>'
    assert fmt_html(None, "s") == "-"


def test_the_target_table_shows_flops_scaled_with_the_exact_count_on_hover(tmp_path):
    page = write_report(synthetic.records([compile_only("v", 20 * GiB)]), tmp_path).index.read_text()
    assert '<span title="71982003847168 FLOP">72 TFLOP</span>' in page
    assert ">71982003847168<" not in page


def test_inspect_prints_tables_within_120_columns():
    cause = "partial sums reduced: activations `activation_heads` sharded over `tensor` " * 3
    static = compile_only("v", 40 * GiB)["stages"]["denoise_step"]["static"] | {
        "cost": {"flops": 2.8e8, "bytes_accessed": 5.7e7},
        "tokens": {"latent_frames": 9, "latent_height": 8, "latent_width": 8, "video_tokens": 576, "text_tokens": 128},
        "collectives": {"by_kind": {"all-reduce": {"count": 67, "operand_bytes": 4629440, "result_bytes": 4629440}}},
        "attribution": {
            "by_scope": {
                "transformer/block/attn1/core": {"flops": 1.7e8, "bytes": 3e7, "collectives": {}},
                "transformer/block": {
                    "flops": 0.0,
                    "bytes": 1.1e7,
                    "collectives": {"all-reduce": {"count": 12.0, "bytes": 2.6e6}},
                },
            },
            "collective_sites": [
                {
                    "scope": "transformer/block",
                    "kind": "all-reduce",
                    "count": 4.0,
                    "bytes": 1691648.0,
                    "cause": cause,
                    "axes": ["tensor"],
                }
            ],
            "coverage": {"flops": 1.0, "bytes": 0.5, "inferred": {"flops": 0.0, "bytes": 0.125}},
        },
    }
    lines = format_static(static)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= WIDTH, text
    assert "{" not in text  # no raw dicts
    assert "attributed to a model scope: flops 100.0%, bytes 50.0% (12.5% inferred)" in text, text
    assert "DOES NOT FIT (40 GiB of 32 GiB HBM per device)" in text and "72 TFLOP per call" in text
    assert "video 576 (latent 9x8x8), text 128" in text and "all-reduce" in text and "4.41 MiB" in text
    flops = lines[lines.index(next(line for line in lines if "top scopes by FLOPs" in line)) + 2]
    assert flops.split()[:3] == ["transformer/block/attn1/core", "170", "MFLOP"]
    site = next(i for i, line in enumerate(lines) if line.startswith("  transformer/block ") and "tensor" in line)
    assert "1.61 MiB" in lines[site] and lines[site + 1].strip().startswith("partial sums reduced")
