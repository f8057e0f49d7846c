"""The package's layers hold (gnnrec_lab/util/layers.py): every module sits in a layer's folder, every
import goes to the same or a lower folder, the imports form no cycle (counting the package
``__init__`` each import runs), an import inside a function keeps something heavy out, and every
module imports alone in a fresh interpreter."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gnnrec_lab.util.layers import HEAVY, INIT_LAYERS, INIT_MODULES, LAYERS, PACKAGE, layer_of

ROOT = Path(__file__).resolve().parents[1] / PACKAGE


@dataclass(frozen=True)
class Import:
    source: str        # importing module
    target: str        # imported package module
    line: int
    deferred: bool     # inside a function
    via: str = ""      # the module the statement names, where ``target`` is a package __init__ it runs

    def where(self) -> str:
        kind = "inside a function" if self.deferred else "at the top"
        how = f" (its __init__, importing {self.via})" if self.via else ""
        return f"{self.source} (line {self.line}, {kind}) imports {self.target}{how}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set:
    """Import nodes under ``if TYPE_CHECKING:``: read by type checkers, never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (getattr(node.test, "id", None) == "TYPE_CHECKING"
                                         or getattr(node.test, "attr", None) == "TYPE_CHECKING"):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _function_nodes(tree: ast.AST) -> set:
    """Import nodes that sit inside a function (at any depth)."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return inside


def _known(name: str, mods: dict) -> str:
    while name not in mods:
        name = name.rpartition(".")[0]
    return name


def init_edges(imp: Import, mods) -> list[Import]:
    """The package ``__init__`` modules that importing ``imp.target`` runs: each package above it,
    but the top package and the packages the importer itself sits in (their ``__init__`` ran first)."""
    parts = imp.target.split(".")
    out = []
    for k in range(2, len(parts)):
        pkg = ".".join(parts[:k])
        if pkg in mods and pkg != imp.source and not imp.source.startswith(pkg + "."):
            out.append(Import(imp.source, pkg, imp.line, imp.deferred, via=imp.target))
    return out


def scan(mods: dict[str, Path]) -> tuple[list[Import], dict[str, set], dict[str, set]]:
    """Package-internal imports, each with the package ``__init__`` modules it runs; for each module
    the package modules and the third-party top-level names it imports at its top (those run when it
    is imported)."""
    imports, top_internal, top_external = [], {m: set() for m in mods}, {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deferred = _function_nodes(tree)
        never_run = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in never_run:
                continue
            targets, external = [], []
            if isinstance(node, ast.Import):
                for a in node.names:
                    (targets if a.name.split(".")[0] == PACKAGE else external).append(a.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.split(".")[0] == PACKAGE:
                    base = node.module
                else:   # third-party (`from numba import njit`): counted below, as `import numba` is
                    base = None
                    if node.module and node.module != "__future__":
                        external.append(node.module)
                if base:
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            is_deferred = id(node) in deferred
            for t in dict.fromkeys(_known(t, mods) for t in targets):
                if t != mod:
                    imp = Import(mod, t, node.lineno, is_deferred)
                    for i in (imp, *init_edges(imp, mods)):
                        imports.append(i)
                        if not is_deferred:
                            top_internal[mod].add(i.target)
            if not is_deferred:
                top_external[mod].update(e.split(".")[0] for e in external)
    return imports, top_internal, top_external


def heavy_loads(mods, top_internal, top_external) -> dict[str, set]:
    """The heavy third-party modules importing each module loads: its own top imports, its top
    package imports' (and their packages' __init__), transitively."""
    def parents(m):
        parts = m.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    out = {}
    for m in mods:
        seen, todo = set(), [m, *parents(m)]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            for t in top_internal[x]:
                todo += [t, *parents(t)]
        out[m] = set().union(*(top_external[x] for x in seen)) & HEAVY
    return out


def find_cycle(imports: list[Import]) -> list[Import]:
    """One import cycle (the imports along it), or [] when there is none."""
    graph: dict[str, list[Import]] = {}
    for i in imports:
        graph.setdefault(i.source, []).append(i)
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[Import] = []

    def visit(m) -> list[Import]:
        state[m] = 1
        for i in graph.get(m, ()):
            if state.get(i.target) == 1:
                start = next(k for k, p in enumerate(path) if p.source == i.target) if path else 0
                return path[start:] + [i]
            if i.target not in state:
                path.append(i)
                found = visit(i.target)
                if found:
                    return found
                path.pop()
        state[m] = 2
        return []

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


MODS = modules()
IMPORTS, TOP_INTERNAL, TOP_EXTERNAL = scan(MODS)


def test_every_module_sits_in_a_layers_folder():
    """Nothing but the package __init__ in the package root; every folder a layer, every layer a folder."""
    missing = [m for m in MODS if not _has_layer(m)]
    assert not missing, f"modules in no folder of gnnrec_lab/util/layers.py's LAYERS: {missing}"
    root = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert not root, f"modules in the package root (put each in its layer's folder): {root}"
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert folders == set(LAYERS), (f"folders that are no layer: {sorted(folders - set(LAYERS))}; "
                                    f"layers with no folder: {sorted(set(LAYERS) - folders)}")
    stray = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("*/*/__init__.py"))
    assert not stray, f"packages inside a layer (a layer is one folder deep): {stray}"


def _has_layer(m):
    try:
        layer_of(m)
        return True
    except KeyError:
        return False


def test_imports_go_to_the_same_or_a_lower_layer():
    names = [*LAYERS, PACKAGE]
    bad = [f"{i.where()}: layer {names[layer_of(i.source)]!r} may not import layer {names[layer_of(i.target)]!r}"
           for i in IMPORTS if layer_of(i.target) > layer_of(i.source)
           and not (i.target == PACKAGE or i.source == PACKAGE and i.deferred)]
    assert not bad, "imports above their layer (gnnrec_lab/util/layers.py):\n" + "\n".join(bad)


def test_the_package_init_imports_only_the_bottom_layers_at_its_top():
    """It runs before every module: what it imports at its top, every module imports."""
    top = max(LAYERS.index(f) for f in INIT_LAYERS)
    bad = [i.where() for i in IMPORTS if i.source == PACKAGE and not i.deferred and layer_of(i.target) > top
           and i.target not in INIT_MODULES]
    assert not bad, bad
    # what INIT_MODULES import at their top stays in the bottom layers
    bad = [i.where() for i in IMPORTS if i.source in INIT_MODULES and not i.deferred and layer_of(i.target) > top
           and i.target not in INIT_MODULES]
    assert not bad, bad


def test_no_import_cycles_even_through_imports_inside_functions():
    cycle = find_cycle(IMPORTS)
    assert not cycle, "import cycle:\n" + "\n".join(i.where() for i in cycle)


def test_an_import_inside_a_function_keeps_a_heavy_module_out():
    heavy = heavy_loads(MODS, TOP_INTERNAL, TOP_EXTERNAL)
    bad = [f"{i.where()}, which loads nothing heavy {i.source} does not load already: import it at the top"
           for i in IMPORTS if i.deferred and not i.via and i.source != PACKAGE
           and not heavy[i.target] - heavy[i.source]]
    assert not bad, "\n".join(bad)


def test_the_scan_sees_imports_inside_functions_and_the_package_inits_they_run():
    assert any(i.source == f"{PACKAGE}.commands.run" and i.target == f"{PACKAGE}.training.loop" and i.deferred
               for i in IMPORTS)
    assert any(i.source == f"{PACKAGE}.config.run" and i.target == f"{PACKAGE}.config.places" and not i.deferred
               for i in IMPORTS)
    # importing kernels.native runs kernels/__init__: an arrow of its own, the module it came through named
    assert any(i.source == f"{PACKAGE}.models.lightgcn" and i.target == f"{PACKAGE}.kernels"
               and i.via.startswith(f"{PACKAGE}.kernels.") for i in IMPORTS)
    # ... but not for the importer's own package, whose __init__ ran before it
    assert not any(i.source == f"{PACKAGE}.kernels.backends" and i.target == f"{PACKAGE}.kernels" for i in IMPORTS)
    # a cycle only through a package __init__ is found (graph -> kernels.native -> kernels/__init__ -> graph)
    mods = {f"{PACKAGE}.graph.bipartite": 0, f"{PACKAGE}.kernels": 0, f"{PACKAGE}.kernels.native": 0}
    first = Import(f"{PACKAGE}.graph.bipartite", f"{PACKAGE}.kernels.native", 1, True)
    back = Import(f"{PACKAGE}.kernels", f"{PACKAGE}.graph.bipartite", 2, False)
    assert find_cycle([first, back]) == []
    assert [i.target for i in find_cycle([first, *init_edges(first, mods), back])][-1] == first.source
    # `from numba import njit` loads numba as `import numba` does
    assert "numba" in TOP_EXTERNAL[f"{PACKAGE}.graph.reorder"]
    # memory.placement names numpy only for its annotations, under TYPE_CHECKING: that loads nothing
    assert "numpy" not in TOP_EXTERNAL[f"{PACKAGE}.memory.placement"]
    loop = [Import("a", "b", 1, False), Import("b", "c", 2, True), Import("c", "a", 3, True)]
    assert [i.source for i in find_cycle(loop)] == ["a", "b", "c"]
    assert find_cycle(loop[:2]) == []


# Imports each module named on stdin in a child forked from a process that has loaded the third-party
# modules the package imports (so each child pays for none of them) and no gnnrec_lab module; up to
# one child per core at a time.
_CHILDREN = r"""
import json, os, sys, traceback
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # gnnrec_lab.util.runtime's, before torch loads
for name in sys.argv[1:]:
    try:
        __import__(name)
    except Exception:
        pass                                          # an optional dependency that is not installed
assert not [m for m in sys.modules if m.split(".")[0] == "gnnrec_lab"]
failures, running = {}, {}

def reap():
    pid, status = os.wait()
    mod, r = running.pop(pid)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    if out or status:
        failures[mod] = out.decode() or f"exit status {status}"

for mod in json.loads(sys.stdin.read()):
    if len(running) >= max(2, os.cpu_count() or 1):
        reap()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(mod)
            msg = b""
        except BaseException:
            msg = traceback.format_exc().encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    running[pid] = (mod, r)
while running:
    reap()
print(json.dumps(failures))
"""


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    third_party = sorted(set().union(*TOP_EXTERNAL.values()))   # what the modules load at their top
    env = dict(os.environ, PYTHONPATH=str(ROOT.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILDREN, *third_party], input=json.dumps(sorted(MODS)),
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"import {m} alone failed:\n{tb}" for m, tb in failures.items())
