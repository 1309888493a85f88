"""What a piece of nlaverify depends on, read from the source: the import graph of the
package's own modules and content hashes over its transitive closure.

The graph is read with :mod:`ast` (nothing is imported), so it sees every import: at module
level and inside functions, relative ones resolved against the importing package. With
``dynamic=True`` it also follows the package's lazy imports, which name their module by a
string: ``importlib.import_module("nlaverify.attention.nadaraya_watson")`` with a literal
argument, and a package ``__init__``'s ``_LAZY`` table (any string constant in a package
``__init__`` that names one of its submodules, fully or by its last part, is an edge: an
over-approximation, which for a dependency hash errs on the safe side). A loop importing
names it computes (the catalogue's :data:`~nlaverify.identities.core.CATALOGUE_MODULES`) is
not followed: each identity's own catalogue module is one of its roots.

Two users: the house rules (``tests/test_house.py``: no import cycle, static edges only) and
the incremental proof check (:mod:`nlaverify.proofs`: an identity is re-derived only when the
hash of the sources it can reach, and of the versions of SymPy, mpmath and NumPy, changed).
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

import networkx as nx

PACKAGE = "nlaverify"
#: the package's folder (the checkout's or the installed one)
PACKAGE_DIR = Path(__file__).resolve().parent
#: third-party distributions whose version is part of every proof's inputs: the derivations
#: run SymPy (with mpmath beneath it), NumPy, and networkx (the graphs); the Python version too
VERSIONED = ("sympy", "mpmath", "numpy", "networkx")


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """The dotted name of a file under the package (``pkg/__init__.py`` names ``pkg``)."""
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package, by dotted name, in sorted order."""
    return {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))
            if "__pycache__" not in p.parts}


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    # a module's package is its name less the last part; a package's own __init__ is its package
    base = base if is_package else base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(name: str, is_package: bool, node: ast.AST, modules: Mapping[str, Path],
             dynamic: bool) -> list[str]:
    """The module names one AST node imports (before trimming to the longest module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        source = _resolve_from(name, is_package, node)
        return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                for a in node.names]
    if not dynamic:
        return []
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", ""))
            in ("import_module", "__import__")):
        return [node.args[0].value]
    if is_package and isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value  # a lazy table of the package's own submodules
        if text in modules and text.startswith(name + "."):
            return [text]
        if f"{name}.{text}" in modules:
            return [f"{name}.{text}"]
    return []


def import_graph(package_dir: Path = PACKAGE_DIR, *, dynamic: bool = False) -> nx.DiGraph:
    """The directed graph ``importer -> imported`` over the package's modules.

    Args:
        package_dir: the package folder to read (a copy of it, in tests).
        dynamic: also follow string-named (lazy) imports, see the module docstring.

    Returns:
        A :class:`networkx.DiGraph` whose nodes are dotted module names; each edge carries the
        line numbers of the imports that make it (``lines``).
    """
    modules = package_modules(package_dir)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(name, is_package, node, modules, dynamic):
                # ``import a.b.c`` names a.b.c; keep the longest prefix that is a module
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    if not graph.has_edge(name, target):
                        graph.add_edge(name, target, lines=[])
                    graph.edges[name, target]["lines"].append(getattr(node, "lineno", 0))
    return graph


def owning_module(qualified: str, modules: Iterable[str]) -> str | None:
    """The longest dotted prefix of ``qualified`` (``pkg.mod.func``) that is a module."""
    known = set(modules)
    name = qualified
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def dependencies(graph: nx.DiGraph, roots: Iterable[str]) -> list[str]:
    """The modules of ``roots`` and every module they reach, sorted (roots that are not
    package modules are ignored)."""
    found: set[str] = set()
    for root in roots:
        if root in graph and root not in found:
            found.add(root)
            found |= nx.descendants(graph, root)
    return sorted(found)


def versions(names: Iterable[str] = VERSIONED) -> dict[str, str]:
    """The installed version of each distribution (``"absent"`` when not installed), and
    Python's ``major.minor``."""
    out = {"python": "{}.{}".format(*sys.version_info[:2])}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


class SourceHasher:
    """Content hashes of module closures, reading each file once.

    ``SourceHasher(package_dir).hash(roots)`` is the SHA-256 (hex) over the versions of
    :func:`versions` and, for every module in :func:`dependencies` of ``roots`` and every
    package ``__init__`` above one of them (importing ``a.b.c`` runs ``a/__init__`` and
    ``a/b/__init__``: a side effect there is hashed, though their own imports are not
    followed, or every closure would hold the whole package), its dotted name and the bytes
    of its source: two trees give the same hash for ``roots`` exactly when those sources (and
    versions) are byte-identical.
    """

    def __init__(self, package_dir: Path = PACKAGE_DIR,
                 pinned: Mapping[str, str] | None = None) -> None:
        self.package_dir = package_dir
        self.graph = import_graph(package_dir, dynamic=True)
        self.paths = package_modules(package_dir)
        self.pinned = dict(versions() if pinned is None else pinned)
        self._digests: dict[str, bytes] = {}

    def _digest(self, module: str) -> bytes:
        if module not in self._digests:
            self._digests[module] = hashlib.sha256(self.paths[module].read_bytes()).digest()
        return self._digests[module]

    def hash(self, roots: Iterable[str]) -> str:
        """The hash of the closure of ``roots`` (see the class docstring)."""
        h = hashlib.sha256()
        for name, version in sorted(self.pinned.items()):
            h.update(f"{name}=={version}\n".encode())
        found = set(dependencies(self.graph, roots))
        for module in list(found):
            parts = module.split(".")
            found.update(".".join(parts[:k]) for k in range(1, len(parts)))
        for module in sorted(m for m in found if m in self.paths):
            h.update(module.encode() + b"\0" + self._digest(module))
        return h.hexdigest()
