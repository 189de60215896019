"""Build the :class:`~harness.metrics.hlo.model.HloModule` of optimized HLO text, once: read the
lines (:mod:`~harness.metrics.hlo.text`), then derive each instruction's callees, trip count,
collective facts, FLOPs and traffic and each computation's runs, in a fixed order. Pure Python."""

from __future__ import annotations

from harness.metrics.hlo import cost
from harness.metrics.hlo.collectives import collective_facts, collective_kind
from harness.metrics.hlo.loops import callees, executions, running, trip_count
from harness.metrics.hlo.model import Computation, DotDims, HloModule, Instruction
from harness.metrics.hlo.text import (
    DOT_KEYS,
    Line,
    dim_labels,
    estimated_cycles,
    get_tuple_index,
    int_list,
    metadata,
    module_header,
    read_computations,
    shape_bytes,
    source_lines,
)


def _index(line: Line) -> int:
    if line.opcode == "get-tuple-element":
        return get_tuple_index(line.attributes)
    if line.opcode == "parameter":
        number = line.literal.strip()
        return int(number) if number.isdigit() else -1
    return -1


class NoEntryError(ValueError):
    """HLO text with no ENTRY computation: not a module (an empty or cut text, or a form the reader
    does not know)."""


def parse(hlo_text: str) -> HloModule:
    """The module of ``compiled.as_text()`` (see :mod:`harness.metrics.hlo.model`), with or without
    computation signatures (jaxlib prints both forms). :class:`NoEntryError` (a ``ValueError``) when
    the text has no ENTRY computation: a module without one would price and count nothing, silently."""
    text = read_computations(hlo_text)
    comps, entry = text.computations, text.entry
    if entry is None:
        first = hlo_text.strip().split("\n", 1)[0][:120]
        raise NoEntryError(
            f"HLO text has no ENTRY computation ({len(comps)} computations read; first line: {first!r}): "
            "expected a module as compiled.as_text() or jaxlib's HloModule.to_string() prints it"
        )
    name, partitions = module_header(hlo_text)
    frames = source_lines(hlo_text)
    called = {id(line): callees(line) for lines in comps.values() for line in lines}
    kinds = {
        id(line): kind
        for lines in comps.values()
        for line in lines
        if (kind := collective_kind(line.opcode, called[id(line)])) is not None
    }
    trips = {id(line): trip_count(line, comps) for lines in comps.values() for line in lines if line.opcode == "while"}
    runs = executions(entry, comps, called, trips)
    runs_alone = running(entry, comps, called)
    own_flops: dict[int, int | None] = {}
    computations = {}
    for lines in comps.values():
        shapes = {line.name: line.shape for line in lines}
        for line in lines:
            own_flops[id(line)] = cost.instruction_flops(line, shapes)
    flops = cost.computation_flops(
        comps, lambda line: own_flops[id(line)], lambda line: called[id(line)], lambda line: trips.get(id(line))
    )
    for comp, lines in comps.items():
        shapes = {line.name: line.shape for line in lines}
        instrs = tuple(
            _instruction(line, shapes, comps, called, kinds, trips, own_flops, frames, comp in runs_alone)
            for line in lines
        )
        root = next((i.name for i in instrs if i.root), None)
        computations[comp] = Computation(comp, instrs, root, runs[comp], comp in runs_alone, flops[comp])
    return HloModule(name, entry, computations, partitions)


def _instruction(
    line: Line,
    shapes: dict[str, str],
    comps: dict[str, list[Line]],
    called: dict[int, tuple[str, ...]],
    kinds: dict[int, str],
    trips: dict[int, int | None],
    own_flops: dict[int, int | None],
    frames: dict[int, str],
    alone: bool,
) -> Instruction:
    names = called[id(line)]
    facts = collective_facts(line, names, comps, lambda other: kinds.get(id(other)))
    name, frame = metadata(line.attributes)
    return Instruction(
        line.name,
        line.shape,
        line.opcode,
        line.operands,
        line.operand_shapes,
        line.attributes,
        line.literal,
        line.root,
        op_name=name,
        source=frames.get(frame, "") if frame is not None else "",
        callees=names,
        bytes=shape_bytes(line.shape),
        operand_bytes=cost.operand_bytes(line, shapes) if facts.kind or facts.wraps else 0,
        collective=facts.kind,
        wraps=facts.wraps,
        async_role=facts.async_role,
        groups=facts.groups,
        pairs=facts.pairs,
        trip_count=trips.get(id(line)),
        index=_index(line),
        flops=own_flops[id(line)],
        traffic=cost.instruction_traffic(line, shapes, comps, facts.async_role) if alone else 0,
        dimensions=int_list(line.attributes, "dimensions") if facts.kind else (),
        dot=DotDims(*(int_list(line.attributes, k) for k in DOT_KEYS)) if line.opcode == "dot" else None,
        dim_labels=dim_labels(line.attributes) if line.opcode == "convolution" else None,
        estimated_cycles=estimated_cycles(line.attributes),
    )
