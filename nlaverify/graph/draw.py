"""Draw a graph as a standalone SVG: layers top to bottom (Sugiyama: long edges routed
through slots of their own, barycentre ordering), arrowheads on every edge.

``python -m nlaverify.graph.draw --preset tiny docs/figures/tiny_graph.svg``
"""

from __future__ import annotations

import argparse
from html import escape
from pathlib import Path

import networkx as nx

_FILL = {"input": "#fde68a", "param": "#bfdbfe", "op": "#e5e7eb"}
_W, _H, _DX, _DY = 190, 26, 14, 56
#: the width of the slot a long edge takes in each row it passes through
_SLOT = 10


def _rows(graph: nx.DiGraph) -> dict[str, int]:
    """Rows (layers), every edge pointing down: an op one row below its lowest non-parameter
    argument; a parameter one row above its first consumer."""
    row: dict[str, int] = {}
    for n in nx.topological_sort(graph):
        a = graph.nodes[n]
        if a["kind"] == "param":
            continue
        preds = [row[u] for u in graph.predecessors(n) if graph.nodes[u]["kind"] != "param"]
        row[n] = 1 + max(preds, default=0)
    for n, a in graph.nodes(data=True):
        if a["kind"] == "param":
            row[n] = min(row[c] for c in graph.successors(n)) - 1
    return row


def _layout(graph: nx.DiGraph) -> tuple[list[list[str]], dict[tuple[str, str], list[str]]]:
    """Layers with a dummy slot for every row a long edge crosses (so that no edge crosses a
    box: Sugiyama's layering), ordered by barycentre sweeps; the slots of each edge."""
    row = _rows(graph)
    top = min(row.values())
    layers: list[list[str]] = [[] for _ in range(max(row.values()) - top + 1)]
    order = {n: k for k, n in enumerate(graph.nodes)}
    for n in sorted(row, key=lambda n: (graph.nodes[n]["kind"] == "param", order[n])):
        layers[row[n] - top].append(n)
    chains: dict[tuple[str, str], list[str]] = {}
    up: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for u, v in graph.edges():
        prev, chain = u, []
        for r in range(row[u] + 1, row[v]):
            d = f"\x00{u}\x00{v}\x00{r}"
            layers[r - top].append(d)
            chain.append(d)
            up[d] = [prev]
            prev = d
        up[v].append(prev)
        chains[(u, v)] = chain
    down: dict[str, list[str]] = {n: [] for n in up}
    for n, parents in up.items():
        for q in parents:
            down[q].append(n)

    def mean(nodes: list[str], index: dict[str, int]) -> float | None:
        at = [index[q] for q in nodes if q in index]
        return sum(at) / len(at) if at else None

    def sweep(k: int, first: dict[str, list[str]], near: int, other: dict[str, list[str]],
              far: int) -> None:
        """Order row ``k`` by the mean index of its neighbours in row ``near`` (``first``),
        a node without any there by its neighbours in row ``far`` (``other``)."""
        a = {n: i for i, n in enumerate(layers[near])} if 0 <= near < len(layers) else {}
        b = {n: i for i, n in enumerate(layers[far])} if 0 <= far < len(layers) else {}
        def key(n: str) -> float:
            m = mean(first[n], a)
            m = mean(other[n], b) if m is None else m
            return layers[k].index(n) if m is None else m
        layers[k].sort(key=key)

    for _ in range(4):  # barycentre sweeps, down then up
        for k in range(1, len(layers)):
            sweep(k, up, k - 1, down, k + 1)
        for k in range(len(layers) - 2, -1, -1):
            sweep(k, down, k + 1, up, k - 1)
    return layers, chains


def to_svg(graph: nx.DiGraph, title: str = "") -> str:
    """The SVG text of ``graph`` (deterministic: same graph, same bytes): layers top to
    bottom, a parameter just above its first consumer, edges with arrowheads routed through
    their own slots in the rows they cross (no edge crosses a box)."""
    layers, chains = _layout(graph)
    pos: dict[str, tuple[float, float]] = {}
    width = 0.0
    for r, layer in enumerate(layers):
        x = float(_DX)
        for n in layer:
            pos[n] = (x, 30.0 + r * _DY)
            x += (_SLOT if n.startswith("\x00") else _W) + _DX
        width = max(width, x)
    height = len(layers) * _DY + 40

    def centre(n: str) -> float:
        return pos[n][0] + (_SLOT if n.startswith("\x00") else _W) / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="monospace" font-size="9">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#6b7280"/>'
           '</marker></defs>',
           f'<text x="{_DX}" y="16" font-size="12">{escape(title)}</text>']
    for (u, v), chain in chains.items():
        pts = [(centre(u), pos[u][1] + _H)]
        for d in chain:
            pts += [(centre(d), pos[d][1]), (centre(d), pos[d][1] + _H)]
        pts.append((centre(v), pos[v][1]))
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="#6b7280" '
                   f'stroke-width="0.7" marker-end="url(#arrow)"/>')
    for node, (x, y) in pos.items():
        if node.startswith("\x00"):
            continue
        a = graph.nodes[node]
        label = node if a["kind"] != "op" else f"{node} [{a['op']}]"
        shape = "x".join(str(s) for s in a.get("shape") or ())
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{_W}" height="{_H}" rx="4" '
                   f'fill="{_FILL[a["kind"]]}" stroke="#374151" stroke-width="0.6"/>')
        out.append(f'<text x="{x + 4:.1f}" y="{y + 11:.1f}">{escape(label[:38])}</text>')
        out.append(f'<text x="{x + 4:.1f}" y="{y + 22:.1f}" fill="#4b5563">{escape(shape)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the SVG of a preset's graph."""
    from nlaverify.config import preset
    from nlaverify.graph.build import build_transformer
    from nlaverify.symbolic.document import write_atomically

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--preset", default="tiny")
    p.add_argument("path")
    args = p.parse_args(argv)
    target = Path(args.path)
    svg = to_svg(build_transformer(preset(args.preset)), f"nlaverify: the {args.preset} preset")
    write_atomically(target.parent, {target.name: svg})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
