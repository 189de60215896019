"""The layering ARCHITECTURE.md promises, checked from the source: no import cycles (function-level
imports included), the harness reaches the model only through ltx2's public names, ltx2 never
imports the harness, reports load neither JAX nor the model and import no metrics, manifests are
read without the model, the shared names live in a leaf, and no source file passes 500 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ltx2", "harness")
MAX_LINES = 500
HEAVY = ("jax", "jaxlib", "flax", "torch", "ltx2")  # what a report of old records must not load


def modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every import statement anywhere in the file (inside
    functions and ``if TYPE_CHECKING:`` blocks too); relative imports resolved."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (``from a import b`` is an edge to ``a.b``
    when that is a module, else to ``a``)."""
    mods = modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for module, names, _ in imports(name, path):
            for target in [f"{module}.{n}" for n in names if f"{module}.{n}" in mods] or [module]:
                while target not in mods and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in mods and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_inside_functions_and_finds_cycles(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_import_cycles() -> None:
    graph = import_graph(ROOT)
    assert graph["harness.run.worker"] >= {"harness.run.jax_stage"}  # a function-level import is an edge
    assert cycles(graph) == []


def test_ltx2_never_imports_the_harness() -> None:
    offenders = [
        (name, module, line)
        for name, path in modules(ROOT, ["ltx2"]).items()
        for module, _, line in imports(name, path)
        if module.split(".")[0] == "harness"
    ]
    assert offenders == []


def public_names(root: Path, module: str) -> set[str] | None:
    """A module's ``__all__`` read from its source (None when it declares none)."""
    mods = modules(root, [module.split(".")[0]])
    for node in ast.parse(mods[module].read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def private_uses(root: Path) -> list[str]:
    """Imports of ``ltx2`` from ``harness`` that reach past the public API: a module that its parent
    package does not export, or a name the module does not export."""
    bad = []
    for name, path in modules(root, ["harness"]).items():
        for module, names, line in imports(name, path):
            parts = module.split(".")
            if parts[0] != "ltx2":
                continue
            where = f"{path.relative_to(root)}:{line}"
            for i in range(1, len(parts)):  # every submodule on the way must be exported by its parent
                exported = public_names(root, ".".join(parts[:i])) or set()
                if parts[i] not in exported or parts[i].startswith("_"):
                    bad.append(f"{where}: {'.'.join(parts[: i + 1])} is not re-exported by {'.'.join(parts[:i])}")
                    break
            else:
                exported = public_names(root, module) or set()
                bad += [f"{where}: {module}.{n} is not public" for n in names if n.startswith("_") or n not in exported]
    return bad


def test_the_harness_uses_only_public_ltx2_names(tmp_path: Path) -> None:
    assert private_uses(ROOT) == []
    # The check itself: a private name and a module ltx2 does not re-export are both caught.
    for package, text in (
        ("ltx2", '__all__ = ["Workload", "stages"]\n'),
        ("ltx2/stages", '__all__ = ["X"]\n'),
        ("harness", ""),
    ):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text(text)
    (tmp_path / "ltx2" / "pipeline.py").write_text("__all__ = []\n")
    (tmp_path / "harness" / "x.py").write_text(
        "from ltx2 import Workload\nfrom ltx2.stages import X, _y\ndef f():\n    from ltx2.pipeline import thing\n"
    )
    assert private_uses(tmp_path) == [
        "harness/x.py:2: ltx2.stages._y is not public",
        "harness/x.py:4: ltx2.pipeline is not re-exported by ltx2",
    ]


def test_no_source_file_over_500_lines() -> None:
    files = [p for d in ("ltx2", "harness", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    files.append(ROOT / "noxfile.py")
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert len(files) > 100 and long == {}


@pytest.mark.parametrize(
    "code",
    [
        "import harness.report, harness.report.html, harness.results.gate, harness.results.baseline",
        "from harness import cli; assert cli.main(['report', sys.argv[1], '--out', sys.argv[2]]) == 0",
    ],
    ids=["import", "cli-report"],
)
def test_reports_need_neither_jax_nor_the_model(tmp_path: Path, code: str) -> None:
    fixture = ROOT / "tests" / "harness" / "fixtures" / "sweep_cpu8.jsonl"
    script = f"import sys\n{code}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    done = subprocess.run(
        [sys.executable, "-c", script, str(fixture), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def importers(root: Path, package: str, forbidden: Iterable[str]) -> list[str]:
    """``file:line module`` of every import (function-level and ``TYPE_CHECKING`` ones too) in the
    modules of ``package`` of a module under one of the ``forbidden`` dotted prefixes."""
    top = package.split(".")[0]
    bad = []
    for name, path in modules(root, [top]).items():
        if name != package and not name.startswith(package + "."):
            continue
        for module, _, line in imports(name, path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(root)}:{line} {module}")
    return bad


def test_reports_import_records_and_the_vocabulary_not_metrics_search_or_jax() -> None:
    assert importers(ROOT, "harness.report", ("harness.metrics", "harness.search", "harness.run", *HEAVY)) == []


def test_the_search_does_not_import_the_report() -> None:
    assert importers(ROOT, "harness.search", ("harness.report",)) == []


def test_manifest_parsing_imports_no_model() -> None:
    assert importers(ROOT, "harness.plan", ("ltx2", "jax", "flax", "torch")) == []


def test_the_vocabulary_is_a_leaf() -> None:
    assert import_graph(ROOT)["harness.vocabulary"] == set()
    assert importers(ROOT, "harness.vocabulary", HEAVY) == []


def test_importers_sees_imports_inside_functions(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "a.py").write_text("import os\n\ndef f():\n    from jax import numpy\n")
    (tmp_path / "pkg" / "b.py").write_text("import jax\n")
    assert importers(tmp_path, "pkg.sub", ("jax",)) == ["pkg/sub/a.py:4 jax"]


def test_reading_every_manifest_loads_neither_jax_nor_the_model() -> None:
    """Importing the plan (variants included) and reading every manifest under experiments/ leaves
    JAX and ltx2 unloaded; expanding one is what loads the model (checked last, same process)."""
    script = (
        "import sys, pathlib\n"
        "import harness.plan, harness.plan.manifest, harness.plan.variants\n"
        "paths = sorted(pathlib.Path('experiments').rglob('*.toml'))\n"
        "names = [harness.plan.manifest.load_manifest(p).name for p in paths]\n"
        f"print(len(names), sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
        "import harness.expansion\n"
        "harness.expansion.load_sweep(paths[0])\n"
        "print('ltx2' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    read, expanded = done.stdout.strip().splitlines()[-2:]
    assert read == f"{len(list((ROOT / 'experiments').rglob('*.toml')))} []"
    assert expanded == "True"


# The harness's folders and top-level modules, lowest first: a module imports only modules of its own
# layer or of layers below it (function-level and TYPE_CHECKING imports included). ARCHITECTURE.md
# says why each sits where it does.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "harness.vocabulary",
        "harness.catalogue",
        "harness.families",
        "harness.fmt",
        "harness.agreement",
        "harness.revision",
    ),
    ("harness.hardware",),
    ("harness.targets", "harness.testing"),
    ("harness.plan",),
    ("harness.model",),
    ("harness.expansion",),
    ("harness.metrics.hlo",),
    ("harness.metrics.compiled",),
    ("harness.metrics",),
    ("harness.results",),
    ("harness.calibration",),
    ("harness.report",),
    ("harness.run",),
    ("harness.search", "harness.bisect"),
    ("harness.commands", "harness.docgen", "harness.cli", "harness.__main__", "harness"),
)


def layer_of(module: str, layers: Sequence[Sequence[str]] = LAYERS) -> int | None:
    """The index of the layer a module belongs to (its longest matching prefix; a package's own name,
    ``harness``, only itself), None if none."""
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(layers):
        for p in prefixes:
            inside = module.startswith(p + ".") and "." in p
            if (module == p or inside) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]], layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """``a -> b`` for every import of a module from a higher layer (and of a module in no layer)."""
    bad = []
    for a, targets in sorted(graph.items()):
        la = layer_of(a, layers)
        for b in sorted(targets):
            lb = layer_of(b, layers)
            if a.split(".")[0] == b.split(".")[0] and (la is None or lb is None or lb > la):
                bad.append(f"{a} -> {b}")
    return bad


def test_the_harness_imports_only_downward_in_its_folder_order() -> None:
    graph = import_graph(ROOT, ["harness"])
    assert [m for m in graph if layer_of(m) is None] == []
    assert upward_imports(graph) == []


def test_the_folder_order_check_sees_an_upward_import() -> None:
    graph = {"pkg.low.a": {"pkg.high.b"}, "pkg.high.b": {"pkg.low.a"}, "pkg.new": {"pkg.low.a"}}
    assert upward_imports(graph, (("pkg.low",), ("pkg.high",), ("pkg",))) == [
        "pkg.low.a -> pkg.high.b",
        "pkg.new -> pkg.low.a",  # a module in no layer: the order has to say where it sits
    ]
