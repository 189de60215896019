"""The text layer of the HLO reader: optimized HLO text (`jax.stages.Compiled.as_text()`) read
into computations of printed instruction lines, before anything is derived from them.

:func:`read_computations` groups the :class:`Line` of each computation in schedule order and finds
ENTRY; :func:`shape_bytes` / :func:`shape_dims` read shapes; :func:`source_lines` reads the
module's stack-frame tables (the source line that traced an instruction). What the lines mean
(callees, trip counts, collectives, costs) is :func:`harness.metrics.hlo.parse`'s. Pure Python.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

# Element width in bits; sub-byte types are packed.
_DTYPE_BITS: dict[str, int] = {
    "pred": 8,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "f4e2m1fn": 4,
    "s8": 8,
    "u8": 8,
    "f8e3m4": 8,
    "f8e4m3": 8,
    "f8e4m3fn": 8,
    "f8e4m3fnuz": 8,
    "f8e4m3b11fnuz": 8,
    "f8e5m2": 8,
    "f8e5m2fnuz": 8,
    "f8e8m0fnu": 8,
    "s16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "s32": 32,
    "u32": 32,
    "f32": 32,
    "s64": 64,
    "u64": 64,
    "f64": 64,
    "c64": 64,
    "c128": 128,
}

_ARRAY_SHAPE = re.compile(r"\b(" + "|".join(sorted(_DTYPE_BITS, key=len, reverse=True)) + r")\[([^\]]*)\]")
# A computation header, as ``compiled.as_text()`` and jaxlib's ``HloModule.to_string()`` print it
# (``%fused (p: f32[4]) -> f32[4] {``) or as ``XlaComputation.as_hlo_text()`` does (``fused {``,
# no signature, no ``%``).
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([^\s(={}]+)\s*(?:\(.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
_COMMENT = re.compile(r"/\*.*?\*/")
_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_STACK_FRAME = re.compile(r"\bstack_frame_id=(\d+)")
_TABLE_ENTRY = re.compile(r"^(\d+) (.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")


@dataclass(frozen=True)
class Line:
    """One instruction as printed.

    `operands` are names, `operand_shapes` their inline shapes where the text prints them
    (else ""), `attributes` the text after the operand list, and `literal` the text inside
    the parentheses of `constant(...)`, `parameter(...)` and `iota()`; `root`: it is its
    computation's ROOT.
    """

    name: str
    shape: str
    opcode: str
    operands: tuple[str, ...]
    operand_shapes: tuple[str, ...]
    attributes: str
    literal: str = ""
    root: bool = False


def metadata(attributes: str) -> tuple[str, int | None]:
    """``metadata.op_name`` (the JAX path of the op, ``jit(f)/while/body/<scopes>/dot_general``, or "")
    and ``metadata.stack_frame_id`` (the innermost frame in the module's stack-frame table, or None)."""
    start = max(attributes.rfind("metadata={"), 0)  # printed last: search from there
    at = attributes.find('op_name="', start)
    end = attributes.find('"', at + 9) if at >= 0 else -1
    if at > 0 and not (attributes[at - 1].isalnum() or attributes[at - 1] == "_") and "\\" not in attributes[at:end]:
        name = attributes[at + 9 : end] if end >= 0 else ""  # the plain case, without a regex
    else:
        m = _OP_NAME.search(attributes, start)
        name = m.group(1) if m else ""
    frame = _STACK_FRAME.search(attributes, start) if "stack_frame_id=" in attributes else None
    return name, (int(frame.group(1)) if frame else None)


@dataclass(frozen=True)
class Text:
    """A module's text read into computations: name -> lines in schedule order (text order of
    computations kept), the ENTRY computation's name (None without one)."""

    computations: dict[str, list[Line]]
    entry: str | None


# XLA's memory spaces (xla/layout.h): 0 the device's own memory (HBM), 1 "generic fast memory" (on TPU
# the core's VMEM, where memory-space assignment prefetches buffers), 5 host memory; libtpu prints
# others (2, 6-8) on scalars (SMEM, sync flags). A layout names its space as ``S(n)``; none is 0.
DEVICE_MEMORY = 0
_ARRAY_LAYOUT = re.compile(_ARRAY_SHAPE.pattern + r"(\{[^}]*\})?")
_MEMORY_SPACE = re.compile(r"\bS\((\d+)\)")


@functools.lru_cache(maxsize=1 << 16)  # a program repeats its few shapes thousands of times
def shape_bytes(shape: str, memory_space: int | None = None) -> int:
    """Bytes of an HLO shape string; tuples are summed, `<=` bounds ignored. With ``memory_space``,
    only the arrays whose layout puts them there (``S(n)``; none printed: :data:`DEVICE_MEMORY`)."""
    total = 0
    for dtype, dims, layout in _ARRAY_LAYOUT.findall(shape):
        if memory_space is not None:
            space = _MEMORY_SPACE.search(layout) if layout else None
            if (int(space.group(1)) if space else DEVICE_MEMORY) != memory_space:
                continue
        elements = 1
        for dim in filter(None, (d.strip().removeprefix("<=") for d in dims.split(","))):
            elements *= int(dim) if dim.isdigit() else 1
        total += (elements * _DTYPE_BITS[dtype] + 7) // 8
    return total


def _split_top_level(text: str) -> tuple[str, str]:
    """Split `a, b), attrs` at the `)` closing the operand list -> (`a, b`, `, attrs`)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return text[:i], text[i + 1 :]
            depth -= 1
    return text, ""


_ALIASED_OPERAND = re.compile(r":\s*\((\d+),")
_ALIASING = re.compile(r"\boutput_to_operand_aliasing=\{(.*?\))\}")


def aliased_operands(attributes: str) -> tuple[int, ...]:
    """Operand numbers an op's ``output_to_operand_aliasing`` names (one per aliased output)."""
    m = _ALIASING.search(attributes)
    return tuple(int(n) for n in _ALIASED_OPERAND.findall(m.group(1))) if m else ()


def top_level_items(text: str) -> Iterator[str]:
    """Comma-separated items of ``text`` outside brackets (``a, (b, c), d`` -> a, (b, c), d)."""
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i].strip()
            start = i + 1
    if text[start:].strip():
        yield text[start:].strip()


def _parse_operand(item: str) -> tuple[str, str]:
    """`%x` or `f32[4]{0} %x` -> (name, inline shape or "")."""
    shape, _, name = item.rpartition(" ")
    return name.lstrip("%"), shape


def parse_line(line: str) -> Line | None:
    """Parse one instruction line of HLO text; None for anything else."""
    m = _INSTRUCTION.match(_COMMENT.sub("", line) if "/*" in line else line)
    if not m:
        return None
    name, shape, opcode, rest = m.groups()
    root = line.lstrip().startswith("ROOT ")
    operand_text, attributes = _split_top_level(rest)
    if opcode in ("constant", "parameter", "iota"):
        return Line(name, shape, opcode, (), (), attributes, operand_text, root)
    operands = [_parse_operand(item) for item in top_level_items(operand_text)]
    return Line(name, shape, opcode, tuple(n for n, _ in operands), tuple(s for _, s in operands), attributes, "", root)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _brace_depth(line: str) -> int:
    """``{`` minus ``}`` of ``line`` outside string literals."""
    if '"' not in line:
        bare = line
    elif "\\" not in line and line.count('"') % 2 == 0:
        bare = "".join(line.split('"')[::2])  # no escapes: the strings are what lies between quote pairs
    else:
        bare = _STRING.sub("", line)
    return bare.count("{") - bare.count("}")


def _logical_lines(hlo_text: str) -> Iterator[str]:
    """Lines of ``hlo_text``, an instruction whose attributes span several lines joined into one.
    A Mosaic (Pallas TPU) custom call prints ``frontend_attributes={kernel_metadata={`` and its
    JSON on lines of their own, starting at column 0 like a computation header."""
    pending: list[str] = []
    depth = 0
    for line in hlo_text.splitlines():
        if pending:
            pending.append(line)
            depth += _brace_depth(line)
        elif line[:1].isspace() and (depth := _brace_depth(line)) > 0:
            pending = [line]  # an instruction left open: its continuation lines follow
        else:
            yield line
            continue
        if depth <= 0:
            yield " ".join(pending)
            pending = []
    if pending:
        yield " ".join(pending)


def read_computations(hlo_text: str) -> Text:
    """Group instruction lines by computation and find ENTRY."""
    computations: dict[str, list[Line]] = {}
    entry, current = None, None
    for line in _logical_lines(hlo_text):
        if line and not line[0].isspace():
            header = _COMPUTATION.match(line)
            current = None
            if header:
                current = header.group(2).lstrip("%")
                computations[current] = []
                entry = current if header.group(1) else entry
            continue
        if current is not None and (instr := parse_line(line)):
            computations[current].append(instr)
    return Text(computations, entry)


_INDEX = re.compile(r"\bindex=(\d+)")


def get_tuple_index(attributes: str) -> int:
    """A ``get-tuple-element``'s ``index=`` (-1 where absent)."""
    m = _INDEX.search(attributes)
    return int(m.group(1)) if m else -1


_NUM_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")


def module_header(hlo_text: str) -> tuple[str, int]:
    """(module name, ``num_partitions``: 1 where the header gives none) from the ``HloModule`` line."""
    header = hlo_text.split("\n", 1)[0]
    first = header.split()
    name = first[1].rstrip(",") if len(first) > 1 and first[0] == "HloModule" else ""
    m = _NUM_PARTITIONS.search(header)
    return name, int(m.group(1)) if m else 1


@functools.lru_cache(maxsize=1 << 16)
def shape_dims(shape: str) -> tuple[int, ...] | None:
    """Dimensions of a single-array HLO shape (``bf16[4,8]{1,0:T(8,128)}`` -> (4, 8)); None for tuples."""
    found = _ARRAY_SHAPE.findall(shape)
    if len(found) != 1:
        return None
    return tuple(int(d.strip().removeprefix("<=")) for d in found[0][1].split(",") if d.strip())


SOURCE_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
"""The tables the printer writes before the computations (source locations), in their order."""


def _tables(hlo_text: str) -> dict[str, dict[int, str]]:
    """The module's ``FileNames`` / ``FunctionNames`` / ``FileLocations`` / ``StackFrames`` tables:
    table -> id -> entry text (as printed before the computations)."""
    tables: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in hlo_text.splitlines():
        if line in SOURCE_TABLES:
            current = tables.setdefault(line, {})
        elif current is not None and (m := _TABLE_ENTRY.match(line)):
            current[int(m.group(1))] = m.group(2)
        elif line.strip() == "" or current is None:
            continue
        else:
            current = None
    return tables


def source_lines(hlo_text: str) -> dict[int, str]:
    """Stack frame id -> ``file:line (function)`` of its innermost location, from the tables the
    printer writes before the computations (XLA >= 0.7 metadata: ``stack_frame_id`` instead of
    ``source_file``/``source_line``). Frame ids are the printed ids, which ``stack_frame_id``
    refers to (checked against known lines in ``tests/harness/metrics/test_attribution.py``)."""
    tables = _tables(hlo_text)
    files = {k: v.strip('"') for k, v in tables.get("FileNames", {}).items()}
    functions = {k: v.strip('"') for k, v in tables.get("FunctionNames", {}).items()}
    locations = {k: dict((a, int(b)) for a, b in _FIELD.findall(v)) for k, v in tables.get("FileLocations", {}).items()}
    out = {}
    for frame, text in tables.get("StackFrames", {}).items():
        loc = locations.get(dict((a, int(b)) for a, b in _FIELD.findall(text)).get("file_location_id", -1))
        if loc is not None:
            where = f"{files.get(loc.get('file_name_id', -1), '?')}:{loc.get('line', '?')}"
            out[frame] = f"{where} ({functions.get(loc.get('function_name_id', -1), '?')})"
    return out


# --------------------------------------------------------------------------- attributes and provenance

DOT_KEYS = ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims")
_INT_LISTS = {key: re.compile(rf"\b{key}=\{{([0-9,]*)\}}") for key in ("dimensions", *DOT_KEYS)}
DIM_LABELS = re.compile(r"\bdim_labels=([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)")
_ESTIMATED = re.compile(r'"estimated_cycles"\s*:\s*"?(\d+)"?')
_METADATA = re.compile(r",?\s*metadata=\{[^{}]*\}")


def int_list(attributes: str, key: str) -> tuple[int, ...]:
    """The integers of ``key={1,2}`` (``dimensions`` or one of :data:`DOT_KEYS`); () where absent."""
    m = _INT_LISTS[key].search(attributes)
    return tuple(int(v) for v in m.group(1).split(",") if v) if m else ()


def dim_labels(attributes: str) -> tuple[str, str, str] | None:
    """A convolution's ``dim_labels=b01f_01io->b01f`` as (lhs, rhs, output); None where absent."""
    m = DIM_LABELS.search(attributes)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def estimated_cycles(attributes: str) -> int | None:
    """The compiler's ``estimated_cycles`` in an instruction's backend_config (TPU); None where absent."""
    m = _ESTIMATED.search(attributes) if "estimated_cycles" in attributes else None
    return int(m.group(1)) if m else None


def instruction_name(line: str) -> str | None:
    """The name an instruction line defines; None for any other line."""
    m = _INSTRUCTION.match(_COMMENT.sub("", line) if "/*" in line else line)
    return m.group(1) if m else None


def without_provenance(hlo_text: str) -> str:
    """The text without what says where it came from: every ``metadata={...}`` (JAX op names, source
    lines) and the module's source tables (:data:`SOURCE_TABLES`, paths included)."""
    kept, table = [], False
    for line in hlo_text.splitlines():
        table = line in SOURCE_TABLES or (table and bool(line.strip()))
        if not table:
            kept.append(_METADATA.sub("", line))
    return "\n".join(kept)
