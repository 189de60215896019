"""TPU async collective fusions (libtpu's ``xla_tpu_enable_async_collective_fusion*`` flags) in the
schedule simulator and the collective counts, on hand-written snippets with known answers.

The form is the one libtpu 0.0.42.1 emits for the 19B step with the flags (``compiled.as_text()``
of ``experiments/v6e.toml``'s ``trillium-async``), trimmed to f32 shapes: an ``async-collective-start``
fusion whose computation's ROOT is the ``AsyncCollectiveStart`` custom call on the all-gather, then
compute fusions with a ``continuation_config`` that also pass the collective's state on (aliased
operands and outputs), then an ``async-collective-done`` fusion ending in ``AsyncCollectiveDone``.
Expected numbers come from the spec of :mod:`tests.harness.metrics.test_timeline`: 1 byte per ns of
HBM and of link, no latency or op overhead; an all-gather of an f32[1000] shard over 4 devices sends
4 x 1000 x 3 bytes (ring): 12000 ns. A continuation's compute is its own bytes only: ``add(q, q)`` of
f32[N] reads 4N and writes 4N bytes (the shared operand is read once), 8N ns.
"""

from __future__ import annotations

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import collective_stats, parse
from harness.metrics.hlo.cost import memory_traffic_bytes
from harness.metrics.timeline.program import build_program
from tests.harness.metrics.test_timeline import GROUPS, _module, _spec, gather_ns

STATE = "f32[1000]{0}, f32[4000]{0}, s32[2]{0}, u32[]"
ALIASING = "output_to_operand_aliasing={{1}: (0, {}), {2}: (1, {}), {3}: (1, {}), {4}: (2, {}), {5}: (3, {})}"
CONTINUATION = (
    'backend_config={"flag_configs":[],"continuation_config":{"output_tuple_original_start":"0",'
    '"output_tuple_original_end":"0","operand_original_start":"4","operand_original_end":"4"}}'
)


def _start(c: str) -> str:
    return f"""%start_{c} (param_0: f32[1000]) -> ({STATE}) {{
  %param_0 = f32[1000]{{0}} parameter(0)
  %all-gather.s{c} = f32[4000]{{0}} all-gather(%param_0), channel_id=3, {GROUPS}, use_global_device_ids=true, frontend_attributes={{chain_id="{c}"}}
  ROOT %custom-call.s{c} = ({STATE}) custom-call(%all-gather.s{c}), custom_call_target="AsyncCollectiveStart"
}}"""  # noqa: E501 - one HLO instruction per line, as the compiler writes it


def _continuation(c: str, n: int) -> str:
    return f"""%async_collective_fusion.{c} (param_0.1: f32[1000], param_1.1: f32[4000], param_2.1: s32[2], param_3.1: u32[], param_4.1: f32[{n}]) -> (f32[{n}], f32[1000], f32[4000], f32[4000], s32[2], u32[]) {{
  %param_4.1 = f32[{n}]{{0}} parameter(4)
  %add.{c} = f32[{n}]{{0}} add(%param_4.1, %param_4.1)
  %param_0.1 = f32[1000]{{0}} parameter(0)
  %param_1.1 = f32[4000]{{0}} parameter(1)
  %all-gather.c{c} = f32[4000]{{0}} all-gather(%param_0.1), channel_id=3, {GROUPS}, use_global_device_ids=true, frontend_attributes={{chain_id="{c}"}}
  %param_2.1 = s32[2]{{0}} parameter(2)
  %param_3.1 = u32[] parameter(3)
  ROOT %tuple.{c} = (f32[{n}]{{0}}, f32[1000]{{0}}, f32[4000]{{0}}, f32[4000]{{0}}, s32[2]{{0}}, u32[]) tuple(%add.{c}, %param_0.1, %param_1.1, %all-gather.c{c}, %param_2.1, %param_3.1)
}}"""  # noqa: E501


def _done(c: str) -> str:
    return f"""%done_{c} (param_0.2: f32[1000], param_1.2: f32[4000], param_2.2: s32[2], param_3.2: u32[]) -> f32[4000] {{
  %param_0.2 = f32[1000]{{0}} parameter(0)
  %param_1.2 = f32[4000]{{0}} parameter(1)
  %all-gather.d{c} = f32[4000]{{0}} all-gather(%param_0.2), channel_id=3, {GROUPS}, use_global_device_ids=true, frontend_attributes={{chain_id="{c}"}}
  %param_2.2 = s32[2]{{0}} parameter(2)
  %param_3.2 = u32[] parameter(3)
  ROOT %custom-call.d{c} = f32[4000]{{0}} custom-call(%param_0.2, %param_1.2, %all-gather.d{c}, %param_2.2, %param_3.2), custom_call_target="AsyncCollectiveDone"
}}"""  # noqa: E501


def _chain_ops(c: str, p: str, q: str, n: int) -> str:
    """Start on ``p``, one continuation computing ``add(q, q)``, done: the ENTRY lines of one chain."""
    cont = f"(f32[{n}]{{0}}, f32[1000]{{0}}, f32[4000]{{0}}, f32[4000]{{0}}, s32[2]{{0}}, u32[])"
    return f"""  %async-collective-start.{c} = ({STATE}) fusion(%{p}), kind=kCustom, output_to_operand_aliasing={{{{0}}: (0, {{}})}}, calls=%start_{c}
  %s0.{c} = f32[1000]{{0}} get-tuple-element(%async-collective-start.{c}), index=0
  %s1.{c} = f32[4000]{{0}} get-tuple-element(%async-collective-start.{c}), index=1
  %s2.{c} = s32[2]{{0}} get-tuple-element(%async-collective-start.{c}), index=2
  %s3.{c} = u32[] get-tuple-element(%async-collective-start.{c}), index=3
  %fusion.{c} = {cont} fusion(%s0.{c}, %s1.{c}, %s2.{c}, %s3.{c}, %{q}), kind=kOutput, {ALIASING}, calls=%async_collective_fusion.{c}, {CONTINUATION}
  %r.{c} = f32[{n}]{{0}} get-tuple-element(%fusion.{c}), index=0
  %c1.{c} = f32[1000]{{0}} get-tuple-element(%fusion.{c}), index=1
  %c2.{c} = f32[4000]{{0}} get-tuple-element(%fusion.{c}), index=2
  %c4.{c} = s32[2]{{0}} get-tuple-element(%fusion.{c}), index=4
  %c5.{c} = u32[] get-tuple-element(%fusion.{c}), index=5
  %async-collective-done.{c} = f32[4000]{{0}} fusion(%c1.{c}, %c2.{c}, %c4.{c}, %c5.{c}), kind=kCustom, output_to_operand_aliasing={{{{}}: (1, {{}})}}, calls=%done_{c}"""  # noqa: E501


def _one_chain(n: int) -> str:
    entry = f"""ENTRY %main (p: f32[1000], q: f32[{n}]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[{n}]{{0}} parameter(1)
{_chain_ops("0", "p", "q", n)}
  ROOT %out = (f32[{n}]{{0}}, f32[4000]{{0}}) tuple(%r.0, %async-collective-done.0)
}}"""
    return _module(entry, _start("0"), _continuation("0", n), _done("0"))


def test_the_three_roles_are_recognised_and_the_collective_counts_once():
    text = _one_chain(3000)
    module = parse(text)
    roles = {i.name: i.async_role for i in module.computations["main"] if i.async_role}
    assert roles == {"async-collective-start.0": "start", "fusion.0": "continuation", "async-collective-done.0": "done"}
    stats = collective_stats(module)  # the start's all-gather only: shard in, gathered out
    assert (stats["all-gather"].count, stats["all-gather"].operand_bytes, stats["all-gather"].result_bytes) == (
        1,
        4000,
        16000,
    )
    ops = {op.name: op for op in build_program(module).ops["main"]}
    assert (ops["async-collective-start.0"].cls, ops["async-collective-start.0"].kind) == ("start", "all-gather")
    assert ops["async-collective-start.0"].operand_bytes == 4000 and ops["async-collective-start.0"].groups
    assert (ops["async-collective-done.0"].cls, ops["async-collective-done.0"].kind) == ("done", "all-gather")
    assert ops["fusion.0"].cls == "continuation" and ops["fusion.0"].bytes == 8 * 3000  # state left out


def test_continuation_compute_hides_the_transfer():
    spec = _spec()
    t = gather_ns(1000, spec)  # 12000 ns; the continuation: 8 x 3000 = 24000 ns
    p = timeline.predict(parse(_one_chain(3000)), spec)
    assert p.step_ns == pytest.approx(24000.0, rel=1e-12) and t < 24000.0
    assert p.device["exposed_ns_by_kind"] == {}
    # as a trace shows it: the async collective spans its start to its done
    assert p.device["collective_ns_by_kind"]["all-gather"] == pytest.approx(p.step_ns, rel=1e-12)


def test_continuation_hides_half_and_the_done_waits_for_the_rest():
    spec = _spec()
    t = gather_ns(1000, spec)
    p = timeline.predict(parse(_one_chain(750)), spec)  # the continuation: 6000 ns, half of the transfer
    assert p.step_ns == pytest.approx(t, rel=1e-12)
    assert p.device["exposed_ns_by_kind"]["all-gather"] == pytest.approx(t / 2, rel=1e-12)
    waited = [c for c in p.critical_path if c["category"] == "all-gather"]
    assert [(c["op"], c["ns"]) for c in waited] == [("async-collective-start.0", pytest.approx(t / 2, rel=1e-12))]


def test_a_done_waits_for_its_own_chain_not_the_oldest():
    """Chain 1 (started second) is done first: its done follows its state through the continuation,
    so the stream waits at chain 1's done for chain 1's transfer (sharing the links with chain 0:
    both end at 2t). Matching the oldest transfer instead would wait for chain 0's. On the critical
    path the wait is shared by the link time each chain received meanwhile (half each), counted once,
    as chain 1's."""
    spec = _spec()
    t = gather_ns(1000, spec)
    n = 250  # each continuation 2000 ns
    entry = f"""ENTRY %main (p: f32[1000], q: f32[{n}]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[{n}]{{0}} parameter(1)
  %async-collective-start.0 = ({STATE}) fusion(%p), kind=kCustom, output_to_operand_aliasing={{{{0}}: (0, {{}})}}, calls=%start_0
{_chain_ops("1", "p", "q", n)}
  ROOT %out = (f32[{n}]{{0}}, f32[4000]{{0}}, ({STATE})) tuple(%r.1, %async-collective-done.1, %async-collective-start.0)
}}"""  # noqa: E501
    text = _module(entry, _start("0"), _start("1"), _continuation("1", n), _done("1"))
    p = timeline.predict(parse(text), spec)
    done = next(e for e in p.events if e.name == "async-collective-done.1")
    assert (done.start_ns, done.end_ns) == (pytest.approx(8 * n, rel=1e-12), pytest.approx(2 * t, rel=1e-12))
    waited = {c["op"]: (c["ns"], c["count"]) for c in p.critical_path if c["category"] == "all-gather"}
    half = pytest.approx((2 * t - 8 * n) / 2, rel=1e-12)
    assert waited == {"async-collective-start.1": (half, 1), "async-collective-start.0": (half, 0)}
    assert p.device["exposed_ns_by_kind"]["all-gather"] == pytest.approx(2 * t - 8 * n, rel=1e-12)
    assert p.step_ns == pytest.approx(2 * t, rel=1e-12)


def test_traffic_counts_the_transfer_once_at_its_start():
    """The start reads the shard (4000 B) and writes the gathered buffer (16000) and its 12 B of state;
    its output aliasing the shard is not written. The continuation is its add alone (reads and writes
    4 x 3000), not the state it passes on (56024 B of aliased operands and outputs); the done moves
    nothing. Counted as plain fusions, the chain was 140048 B (24012, 80024, 36012)."""
    module = parse(_one_chain(3000))
    traffic = {i.name: i.traffic for i in module.computations["main"] if i.async_role}
    assert traffic == {"async-collective-start.0": 20012, "fusion.0": 24000, "async-collective-done.0": 0}
    assert memory_traffic_bytes(module) == 20012 + 24000
