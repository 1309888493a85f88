"""Draw a graph as a standalone SVG: layers by topological generation, top to bottom.

``python -m nlaverify.graph.draw --preset tiny docs/figures/tiny_graph.svg``
"""

from __future__ import annotations

import argparse
from html import escape
from pathlib import Path

import networkx as nx

_FILL = {"input": "#fde68a", "param": "#bfdbfe", "op": "#e5e7eb"}
_W, _H, _DX, _DY = 190, 26, 14, 56


def to_svg(graph: nx.DiGraph, title: str = "") -> str:
    """The SVG text of ``graph`` (deterministic: same graph, same bytes)."""
    # ops (and inputs) by topological generation of the graph without parameters;
    # each parameter sits in the row of its first consumer, to the right
    core = graph.subgraph(n for n, a in graph.nodes(data=True) if a["kind"] != "param")
    row_of = {n: r for r, gen in enumerate(nx.topological_generations(core)) for n in gen}
    for n, a in graph.nodes(data=True):
        if a["kind"] == "param":
            row_of[n] = min(row_of[c] for c in graph.successors(n))
    order = {n: k for k, n in enumerate(graph.nodes)}
    layers: list[list[str]] = [[] for _ in range(max(row_of.values()) + 1)]
    for n in sorted(row_of, key=lambda n: (graph.nodes[n]["kind"] == "param", order[n])):
        layers[row_of[n]].append(n)
    width = max(len(layer) for layer in layers) * (_W + _DX) + _DX
    height = len(layers) * _DY + 40
    pos: dict[str, tuple[float, float]] = {}
    for row, layer in enumerate(layers):
        for col, node in enumerate(layer):
            pos[node] = (_DX + col * (_W + _DX), 30 + row * _DY)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="monospace" font-size="9">',
           f'<text x="{_DX}" y="16" font-size="12">{escape(title)}</text>']
    for u, v in graph.edges():
        (x1, y1), (x2, y2) = pos[u], pos[v]
        out.append(f'<line x1="{x1 + _W / 2:.1f}" y1="{y1 + _H:.1f}" x2="{x2 + _W / 2:.1f}" '
                   f'y2="{y2:.1f}" stroke="#6b7280" stroke-width="0.7"/>')
    for node, (x, y) in pos.items():
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
