"""House rules of the code base: small modules and an import graph without cycles.

Two checks, both read from the source with :mod:`ast` (nothing is imported):

* no Python module in the package, the benchmarks, the derivations, the scripts, the examples
  or the tests is longer than :data:`MAX_LINES` lines: one concept per module, a module a
  reader can hold in their head (optax's ``base.py``, micrograd's ``engine.py``);
* the import graph among ``nlaverify`` modules has no cycle. Every import counts, at module
  level and inside functions alike (an import inside a function hides a cycle but does not
  break it): ``import a.b`` is an edge to ``a.b``; ``from a import b`` is an edge to ``a.b``
  when that is a module, else to ``a``; relative imports are resolved against the importing
  module's package. A package ``__init__`` that re-exports a submodule which imports back
  ``from nlaverify.pkg import x`` is a cycle too: submodules import their siblings, never
  their package.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from nlaverify import sourcegraph

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "nlaverify"
#: The longest a module may be (lines, as ``wc -l`` counts them).
MAX_LINES = 500
CHECKED_DIRS = (PACKAGE, "benchmarks", "derivations", "scripts", "examples", "tests")


def import_graph() -> nx.DiGraph:
    """The static import graph of the package (:func:`nlaverify.sourcegraph.import_graph`)."""
    return sourcegraph.import_graph(ROOT / PACKAGE)


def _describe(graph: nx.DiGraph, cycle: list[str]) -> str:
    """One cycle as ``a (line 3) -> b (line 9) -> a``."""
    hops = []
    for i, module in enumerate(cycle):
        nxt = cycle[(i + 1) % len(cycle)]
        hops.append(f"{module} (line {graph.edges[module, nxt]['lines'][0]})")
    return " -> ".join([*hops, cycle[0]])


def test_no_module_over_the_line_limit() -> None:
    """No ``.py`` file in the checked directories is longer than :data:`MAX_LINES` lines."""
    too_long = []
    for directory in CHECKED_DIRS:
        for path in sorted((ROOT / directory).rglob("*.py")):
            with path.open("rb") as handle:
                lines = sum(1 for _ in handle)
            if lines > MAX_LINES:
                too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not too_long, f"modules over {MAX_LINES} lines (split them by concept):\n" + "\n".join(
        too_long
    )


def test_no_import_cycle() -> None:
    """The import graph among ``nlaverify`` modules (every import, in functions too) is acyclic."""
    graph = import_graph()
    cycles = sorted(sorted(nx.simple_cycles(graph), key=len)[:50], key=lambda c: (len(c), c))
    assert not cycles, "import cycles among nlaverify modules:\n" + "\n".join(
        _describe(graph, cycle) for cycle in cycles
    )


def test_the_import_graph_sees_imports_inside_functions_and_relative_ones() -> None:
    """The graph builder itself: a function-level import and a relative import each make an edge.

    ``nlaverify.cli`` imports its commands inside functions; a package ``__init__`` importing
    ``from .x import y`` is a relative import. Both must appear, or the cycle check above would
    pass on a graph that misses them.
    """
    graph = import_graph()
    assert graph.number_of_edges() > 100
    inside = [
        (a, b) for a, b in graph.edges if a == f"{PACKAGE}.cli" and b.startswith(f"{PACKAGE}.")
    ]
    assert inside, "no edge out of nlaverify.cli: imports inside functions were missed"
    relative = [
        b for b in graph.successors(f"{PACKAGE}.ops") if b.startswith(f"{PACKAGE}.ops.")
    ]
    assert relative, "no edge from nlaverify.ops to its submodules: relative imports were missed"


#: modules allowed to import a module whose name they compute: the catalogue's loader (each
#: identity's own catalogue module is a root of its proof hash), the lazy ``__getattr__`` of
#: two packages (their ``_LAZY`` tables are read as edges by the graph) and the framework
#: adapters (torch, CuPy: outside the package)
#: (``nlaverify`` itself: its public names are imported on first use, PEP 562; the same
#: modules are imported literally under TYPE_CHECKING, where the import graph sees them)
COMPUTED_IMPORTS = {"nlaverify.identities.core", "nlaverify.check", "nlaverify.interop",
                    "nlaverify.check.adapters", "nlaverify"}


def test_computed_imports_only_where_the_proof_hash_sees_them() -> None:
    """``importlib.import_module(name)`` or ``__import__(name)`` with a computed ``name``
    hides an edge from the import graph, hence from the inputs hash of the incremental proof
    check (:mod:`nlaverify.sourcegraph`): only :data:`COMPUTED_IMPORTS` may do it."""
    import ast

    offenders = []
    for name, path in sourcegraph.package_modules(ROOT / PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and node.args
                    and getattr(node.func, "attr", getattr(node.func, "id", ""))
                    in ("import_module", "__import__")
                    and not isinstance(node.args[0], ast.Constant)
                    and name not in COMPUTED_IMPORTS):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, ("imports by a computed name (name the module literally, or add it "
                           f"to COMPUTED_IMPORTS with the reason): {offenders}")
