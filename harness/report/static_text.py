"""One stage's static metrics as text tables within :data:`~harness.report.console.WIDTH` columns:
the tables ``python -m harness inspect`` prints (its help lists them)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from harness.families import (
    Attribution,
    CollectiveSite,
    OnTarget,
    Roofline,
    ScopeStatic,
    Static,
    TargetMemory,
    read,
)
from harness.fmt import fmt_bytes, fmt_flops, fmt_num, fmt_pct, fmt_time
from harness.report.console import WIDTH, grid
from harness.vocabulary import label

INDENT = "  "
INFERRED = "inferred"


def _facts(static: Static) -> list[tuple[str, str]]:
    """(what, value) lines: compile, cost, memory, tokens."""
    out = []
    if static.timing:
        out.append(("compile", f"lower {fmt_time(static.lower_s)}, compile {fmt_time(static.compile_s)}"))
    if static.cost:
        text = f"{fmt_flops(static.cost_flops)}, {fmt_bytes(static.cost_bytes)} accessed"
        out.append(("cost / device", text + " (XLA's count: loop bodies once)"))
    if static.analytic_flops is not None:
        out.append(("model FLOPs", f"{fmt_flops(static.analytic_flops)} (analytic, whole program, all devices)"))
    if memory := static.memory:
        names = ("argument", "output", "temp", "peak", "bound")
        out.append(("memory / device", ", ".join(f"{n} {fmt_bytes(getattr(memory, f'{n}_bytes'))}" for n in names)))
    if static.tokens:
        out.append(("tokens", _tokens(static.tokens)))
    if static.oom:
        out.append(("out of memory", static.oom_message))
    return out


def _tokens(t: Mapping[str, Any]) -> str:
    """``video 576 (latent 9x8x8), audio 68, text 128`` (other keys as they are)."""
    grid_ = "x".join(str(t[k]) for k in ("latent_frames", "latent_height", "latent_width") if k in t)
    parts = [f"video {t['video_tokens']}" + (f" (latent {grid_})" if grid_ else "")] if "video_tokens" in t else []
    parts += [f"{k.removesuffix('_tokens')} {t[k]}" for k in ("audio_tokens", "text_tokens") if k in t]
    shown = {"video_tokens", "audio_tokens", "text_tokens", "latent_frames", "latent_height", "latent_width"}
    parts += [f"{k} {v}" for k, v in t.items() if k not in shown]
    return ", ".join(parts)


def _target(t: OnTarget) -> list[tuple[str, str]]:
    memory, roof = t.memory or TargetMemory(), t.roofline or Roofline()
    fit = {True: "fits", False: "DOES NOT FIT", None: "fit unknown"}[t.fits]
    need = f"{fmt_bytes(memory.needed_bytes)} of {fmt_bytes(memory.hbm_bytes)} HBM"
    out = [("target", f"{t.device_kind or '?'}: {fit} ({need} per device)")]
    out.append(("FLOPs / device", f"{fmt_flops(t.flops_per_device)} per call"))
    if roof.step_s is not None:
        bound = f", {roof.bound_by}-bound" if roof.bound_by else ""
        calls = t.calls_per_video or 1
        video = fmt_time(t.roofline_per_video_s)
        out.append(("roofline", f"{fmt_time(roof.step_s)} per call{bound}; {video} per video ({calls} calls)"))
    return out


def _kinds(static: Static) -> list[str]:
    by_kind = (static.collectives.by_kind if static.collectives else None) or {}
    rows = [["collective (per call)", "count", "operand", "result"]]
    rows += [
        [k, fmt_num(c.count), fmt_bytes(c.operand_bytes), fmt_bytes(c.result_bytes)]
        for k, c in by_kind.items()
        if c.count
    ]
    return grid(rows, right_from=1) if len(rows) > 1 else []


def _scopes(by_scope: Mapping[str, ScopeStatic], key: str, top: int) -> list[str]:
    """The ``top`` scopes by ``key`` (flops, bytes or collective bytes) with their share of the total."""
    amount = {
        s: (v.collective_bytes if key == "collectives" else float(getattr(v, key) or 0)) for s, v in by_scope.items()
    }
    total = sum(amount.values())
    ranked = [s for s in sorted(amount, key=lambda s: -amount[s]) if amount[s] > 0][:top]
    if not ranked:
        return []
    show = fmt_flops if key == "flops" else fmt_bytes
    title = {"flops": "FLOPs", "bytes": "bytes accessed", "collectives": "collective bytes"}[key]
    others = [k for k in ("flops", "bytes", "collectives") if k != key]
    names = {"flops": "FLOPs", "bytes": "bytes", "collectives": "collectives"}
    rows = [[f"top scopes by {title}", title, "share", *(names[k] for k in others)]]
    for s in ranked:
        v = by_scope[s]
        colls = v.collective_count
        cells = {
            "flops": fmt_flops(v.flops),
            "bytes": fmt_bytes(v.bytes),
            "collectives": f"{fmt_num(colls)} ({fmt_bytes(v.collective_bytes)})" if colls else "-",
        }
        rows.append([label(s), show(amount[s]), fmt_pct(amount[s] / total), *(cells[k] for k in others)])
    return _fit(rows, right_from=1)


def _fit(rows: list[list[str]], right_from: int) -> list[str]:
    """``grid`` with the first column wrapped so that the table stays within WIDTH."""
    rest = sum(max(len(r[i]) for r in rows) + 2 for i in range(1, len(rows[0])))
    width = max(24, WIDTH - len(INDENT) - rest)
    out = []
    for row in rows:
        pieces = textwrap.wrap(row[0], width, break_on_hyphens=False) or [""]
        out.append([pieces[0], *row[1:]])
        out += [[p, *("" for _ in row[1:])] for p in pieces[1:]]
    return grid(out, right_from=right_from)


def _sites(sites: list[CollectiveSite], top: int) -> list[str]:
    """The ``top`` collective sites by bytes: scope, kind, count, bytes, then the cause on its own lines."""
    ranked = sorted(sites, key=lambda s: -float(s.bytes or 0))[:top]
    if not ranked:
        return []
    rows = [["top collective sites (per call)", "kind", "mesh axes", "count", "bytes"]]
    causes = []
    for s in ranked:
        axes = ", ".join(s.axes or ()) or "-"
        rows.append([label(str(s.scope or "")), str(s.kind), axes, fmt_num(s.count), fmt_bytes(s.bytes)])
        causes.append(str(s.cause or "cause unknown"))
    lines = grid(rows, right_from=3)
    out = lines[:2]
    for line, cause in zip(lines[2:], causes, strict=True):
        out.append(line)
        out += textwrap.wrap(cause, WIDTH - 2 * len(INDENT), initial_indent="  ", subsequent_indent="  ")
    more = len(sites) - len(ranked)
    return out + ([f"... {more} more sites (fewer bytes)"] if more > 0 else [])


def attributed(share: float | None, inferred: float | None) -> str:
    """The share of a total with a model scope, and how much of it was inferred (from fused ops,
    neighbours or the fusion) where the record says."""
    return fmt_pct(share) + (f" ({fmt_pct(inferred)} inferred)" if inferred else "")


COVERAGE_KEYS = ("flops", "bytes", "collective_bytes")  # the totals a static coverage holds a share of


def static_attributed(coverage: Mapping[str, Any], key: str) -> str:
    """:func:`attributed` of one total (:data:`COVERAGE_KEYS`) of a static coverage (its shares by
    key, ``inferred``: the same keys, the share of each that was inferred)."""
    inferred = coverage[INFERRED] if INFERRED in coverage else None
    share = coverage[key] if key in coverage else None
    return attributed(share, inferred[key] if isinstance(inferred, Mapping) and key in inferred else None)


def _coverage(coverage: Mapping[str, Any]) -> str:
    """``flops 100%, bytes 50% (12% inferred), ...``: every share the coverage holds."""
    return ", ".join(
        f"{key.replace('_', ' ')} {static_attributed(coverage, key)}"
        for key, share in coverage.items()
        if key != INFERRED and isinstance(share, int | float)
    )


def format_static(raw: Mapping[str, Any], top: int = 8) -> list[str]:
    """The stage's static metrics as lines of at most WIDTH characters (long text wraps)."""
    static: Static = read(Static, raw)
    facts = _facts(static) + (_target(static.target) if static.target else [])
    pad = max((len(k) for k, _ in facts), default=0) + 2
    lines = []
    for key, value in facts:
        wrapped = textwrap.wrap(value, WIDTH - len(INDENT) - pad) or [""]
        lines.append(f"{key.ljust(pad)}{wrapped[0]}")
        lines += [" " * pad + w for w in wrapped[1:]]
    attribution = static.attribution or Attribution()
    blocks = [_kinds(static)]
    if by_scope := attribution.by_scope:
        blocks += [_scopes(by_scope, key, top) for key in ("flops", "bytes", "collectives")]
        if coverage := attribution.coverage:
            blocks.append([f"attributed to a model scope: {_coverage(coverage)}"])
    blocks.append(_sites(list(attribution.collective_sites or ()), top))
    for block in blocks:
        if block:
            lines += ["", *block]
    return [INDENT + line if line else "" for line in lines]
