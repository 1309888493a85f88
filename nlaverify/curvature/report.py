r"""The curvature report of a preset (``nlaverify curvature``): per Transformer block, the top
eigenvalues of the Hessian, GGN, Fisher and empirical Fisher of the loss in that block's
parameters (Lanczos, each with its certified residual), and K-FAC's error against the exact
GGN block of every linear layer (Baggag & Saad §5.1–5.3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nlaverify.curvature.graph import curvature_problem
from nlaverify.curvature.kfac_graph import kfac_errors
from nlaverify.curvature.operators import linear_operator
from nlaverify.curvature.solvers import top_eigenvalues
from nlaverify.errors import ArgumentError

#: the curvature matrices the report shows, in order
REPORT_KINDS = ("hessian", "ggn", "fisher", "empirical_fisher")


@dataclass
class BlockCurvature:
    """One block: its parameter count, the top eigenvalues (and residual bounds) of each
    curvature matrix, and K-FAC's relative error per linear layer (expand and reduce)."""

    block: int
    size: int
    eigenvalues: dict[str, list[float]] = field(default_factory=dict)
    residuals: dict[str, list[float]] = field(default_factory=dict)
    kfac: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"block": self.block, "size": self.size, "eigenvalues": self.eigenvalues,
                "residuals": self.residuals, "kfac": self.kfac}


@dataclass
class CurvatureReport:
    """The report of :func:`curvature_report`."""

    preset: str
    seq_len: int
    batch: int | None
    seed: int
    top: int
    blocks: list[BlockCurvature] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "seq_len": self.seq_len, "batch": self.batch,
                "seed": self.seed, "top": self.top,
                "blocks": [b.as_dict() for b in self.blocks]}


def curvature_report(preset_name: str, *, block: int | None = None, seed: int = 0, n: int = 6,
                     batch: int | None = None, top: int = 3,
                     progress: Callable[[int, int, str], None] | None = None
                     ) -> CurvatureReport:
    """Build the ``preset_name`` Transformer with seeded parameters and data (``n``
    positions, ``batch`` padded sequences), and report each block (or only ``block``);
    ``progress(k, total, stage)`` is called before each block's eigenvalues of each kind
    and its K-FAC comparison."""
    from nlaverify.config import preset
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import check_run_size, init_params, sample_data

    cfg = preset(preset_name)
    check_run_size(cfg, n, batch)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ArgumentError(f"top: expected a positive integer, got {top!r}")
    graph = build_transformer(cfg)
    if block is not None and (isinstance(block, bool) or not isinstance(block, int)
                              or not 0 <= block < cfg.n_blocks):
        raise ArgumentError(f"block: expected an integer in [0, {cfg.n_blocks - 1}] (the "
                            f"blocks of {cfg.name}), got {block!r}")
    check_feasible(cfg, graph, n, batch, block)
    params = init_params(graph, seed)
    data = sample_data(cfg.vocab_size, n, seed, batch=batch, pad=cfg.causal)
    report = CurvatureReport(preset_name, n, batch, seed, top)
    blocks = [block] if block is not None else list(range(cfg.n_blocks))
    total, done = len(blocks) * (len(REPORT_KINDS) + 1), 0

    def tick(stage: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, stage)

    for b in blocks:
        problem = curvature_problem(graph, "jax", params, data, block=b)
        row = BlockCurvature(b, problem.size)
        k = min(top, problem.size)
        for kind in REPORT_KINDS:
            tick(f"block {b} {kind}")
            pairs = top_eigenvalues(linear_operator(problem, kind), problem.size, k, seed=seed)
            row.eigenvalues[kind] = [float(x) for x in pairs.values]
            row.residuals[kind] = [float(x) for x in pairs.residuals]
        tick(f"block {b} K-FAC")
        row.kfac.extend(e.as_dict() for e in kfac_errors(problem))
        report.blocks.append(row)
    return report


#: the largest dense array the report may build (float64 entries): 2 GiB
MAX_ENTRIES = 2**28


def check_feasible(cfg: Any, graph: Any, n: int, batch: int | None, block: int | None) -> None:
    r"""Refuse, before any allocation, a report whose dense arrays would exceed
    :data:`MAX_ENTRIES`: the exact K-FAC seeds, :math:`(PC)^2` for :math:`P` positions and
    :math:`C` classes, and each linear layer's exact GGN block, :math:`((d_{in}+1)
    d_{out})^2`. The report is exact and dense by design: it is for small presets."""
    positions = n * (batch or 1)
    need = [(f"the exact K-FAC seeds ({positions} positions x {cfg.vocab_size} classes, "
             "squared)", (positions * cfg.vocab_size) ** 2)]
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] == "param" and attrs.get("block") is not None and \
                (block is None or attrs["block"] == block) and len(attrs["shape"]) == 2 \
                and any(graph.nodes[u].get("op") in ("linear", "affine")
                        for u in graph.successors(node)):
            d_in, d_out = (int(x) for x in attrs["shape"])
            need.append((f"the exact GGN block of {node} ({d_in}+1 x {d_out} weights, "
                         "squared)", ((d_in + 1) * d_out) ** 2))
    what, entries = max(need, key=lambda t: t[1])
    if entries > MAX_ENTRIES:
        raise ArgumentError(
            f"curvature: preset {cfg.name!r} at {positions} positions needs {what}: "
            f"{entries:.3g} float64 entries ({8 * entries / 2**30:.3g} GiB), above the "
            f"report's limit of {MAX_ENTRIES:.3g}; the report is exact and dense, for small "
            "presets such as 'tiny' (use nlaverify.curvature's matrix-free operators on "
            "larger models)")


def format_report(report: CurvatureReport) -> str:
    """The text form: per block, a line of eigenvalues per matrix, then the K-FAC table."""
    batch = "one sequence" if report.batch is None else f"batch {report.batch}"
    lines = [f"curvature of {report.preset} ({batch}, {report.seq_len} positions, seed "
             f"{report.seed}): top {report.top} eigenvalues by Lanczos (+- certified residual)"]
    for b in report.blocks:
        lines.append(f"block {b.block} ({b.size} parameters)")
        for kind in REPORT_KINDS:
            vals = ", ".join(f"{v:.6g} (+-{r:.1e})" for v, r in zip(
                b.eigenvalues[kind], b.residuals[kind], strict=True))
            lines.append(f"  {kind:<17} {vals}")
        lines.append("  K-FAC vs exact GGN block, ||A (x) G - GGN||_F / ||GGN||_F:")
        layers = list(dict.fromkeys(e["layer"] for e in b.kfac))
        for layer in layers:
            errs = {e["mode"]: e for e in b.kfac if e["layer"] == layer}
            size = next(iter(errs.values()))["size"]
            lines.append(f"    {layer:<22} {size:>6}  expand {errs['expand']['relative_error']:.3e}"
                         f"  reduce {errs['reduce']['relative_error']:.3e}")
    return "\n".join(lines)

