"""A cheap per-device cost of a layout, from the model's arrays and FLOPs alone: what orders the
candidates so that the promising ones compile first. It is coarse on purpose (no schedule, no
overlap, no fusion); the compiled program and the schedule simulator decide.

Per device and per transformer forward (one denoising step of the workload's batch):

- compute: the forward's matmul FLOPs over the mesh axes that split the work (batch, tokens, and
  heads / FFN hidden split Megatron-style), at the device's peak;
- weight gathers: a parameter sharded over an axis that also splits the tokens or the batch is
  gathered whole every step (FSDP): its bytes times ``1 - 1/shards``;
- partial sums: with heads / FFN hidden split over an axis that does not split the tokens, the
  attention and FFN outputs are all-reduced (4 per block per stream: self, text and cross
  attention, FFN), ``2 (T-1)/T`` of the activation's bytes each;
- sequence split: self-attention gathers the other shards' keys and values;
- attention logits: the ``xla`` kernel writes and reads the ``[B, N, Lq, Lk]`` fp32 scores of every
  self- and cross-attention through memory (4 passes: logits out, softmax in and out, values in),
  split over the axes that split batch, query tokens and heads; ``splash`` keeps them on chip;
- the collectives' bytes at the device's interconnect bandwidth and the logits' at its memory
  bandwidth, added to compute (no overlap);
- weight memory: every parameter's bytes over the product of its dims' shard counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.search.facts import ModelFacts
from harness.search.space import Candidate, dim_axes


@dataclass(frozen=True)
class Hardware:
    """Per-device peak numbers the estimate uses."""

    peak_flops: float
    link_bytes_per_s: float
    hbm_bytes: float | None
    hbm_bytes_per_s: float


@dataclass(frozen=True)
class Estimate:
    compute_s: float
    collective_bytes: float
    logits_bytes: float  # attention scores through memory (xla kernel)
    step_s: float
    weight_bytes: float  # per device


def _size(mesh: dict[str, int], axes: set[str] | tuple[str, ...]) -> int:
    return math.prod(mesh[a] for a in axes)


def estimate(facts: ModelFacts, c: Candidate, hw: Hardware) -> Estimate:
    """The analytic cost of ``c`` (see the module docstring); ``c`` must have passed pruning."""
    mesh = dict(c.mesh)
    batch, length = (set(dim_axes(facts, c, (n,))[0]) for n in ("activation_batch", "activation_length"))
    data = batch | length
    model = (set(dim_axes(facts, c, ("heads",))[0]) | set(dim_axes(facts, c, ("mlp",))[0])) - data
    compute_s = facts.forward_flops / _size(mesh, data | model) / hw.peak_flops
    weights = gathered = 0.0
    for p in facts.params:
        axes = dim_axes(facts, c, p.names)
        nbytes = p.count * math.prod(p.shape) * p.itemsize
        weights += nbytes / _size(mesh, {a for dim in axes for a in dim})
        g = _size(mesh, {a for dim in axes for a in dim if a in data})
        gathered += nbytes * (1 - 1 / g)
    act = (
        facts.act_itemsize
        * facts.batch
        * (facts.video_tokens * facts.inner_dim + facts.audio_tokens * facts.audio_inner_dim)
    )
    t, s = _size(mesh, model), _size(mesh, length)
    reduced = 4 * act / _size(mesh, data) * 2 * (t - 1) / t * facts.num_layers
    kv = 2 * act / _size(mesh, data | model) * (s - 1) * facts.num_layers
    collective = gathered + reduced + kv
    per_device = _logits_bytes(facts) / _size(mesh, data | model) * facts.num_layers
    logits = 0.0 if c.attention.startswith("splash") else per_device  # the splash kernels keep them in VMEM
    step = compute_s + collective / hw.link_bytes_per_s + logits / hw.hbm_bytes_per_s
    return Estimate(compute_s, collective, logits, step, weights)


def _logits_bytes(facts: ModelFacts) -> float:
    """fp32 scores of one block's attentions (self, text and cross of both streams), 4 passes each."""
    L, A, S = facts.video_tokens, facts.audio_tokens, facts.text_tokens
    pairs = L * L * facts.heads + A * A * facts.audio_heads + (L + A) * S * facts.heads + 2 * L * A * facts.audio_heads
    return 4.0 * 4 * facts.batch * pairs
