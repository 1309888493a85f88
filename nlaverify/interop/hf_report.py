r"""The report of :func:`~nlaverify.interop.hf_verify.verify_hf`: its rows and its text.

:class:`HFNodeRow` is one graph node (HF's value against the graph's, the tolerance model's
bound), :class:`HFCheck` an end-to-end check (a parameter gradient, the RoPE frequencies, a
checkpoint's weights, a patched call's fidelity), :class:`HFVerifyReport` the whole outcome
and :func:`format_hf_report` its text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nlaverify.errors import UnknownNameError


@dataclass(frozen=True)
class HFNodeRow:
    """One graph node: HF's value (``hf``, the capture it comes from) against the graph's,
    normwise error and the tolerance model's bound."""

    node: str
    op: str
    hf: str
    error: float
    bound: float
    note: str = ""
    #: stock mode on a float64 model: float32's bound at this node (HF's own rounding)
    bound32: float | None = None

    @property
    def ok(self) -> bool:
        return self.error <= self.bound

    @property
    def ok32(self) -> bool:
        """Within float32's bound (stock mode), or within the model dtype's."""
        return self.ok or (self.bound32 is not None and self.error <= self.bound32)


@dataclass(frozen=True)
class HFCheck:
    """An end-to-end check: a parameter gradient (by its HF state-dict key), the RoPE
    frequencies of exact mode, a checkpoint's weights, or the fidelity of one patched HF
    call (stock vs exact, float32's bound)."""

    name: str
    error: float
    bound: float
    note: str = ""
    #: stock mode on a float64 model: float32's bound (gradients only)
    bound32: float | None = None

    @property
    def ok(self) -> bool:
        return self.error <= self.bound

    @property
    def ok32(self) -> bool:
        """Within float32's bound (stock mode), or within the model dtype's."""
        return self.ok or (self.bound32 is not None and self.error <= self.bound32)


@dataclass
class HFVerifyReport:
    """The outcome of :func:`~nlaverify.interop.hf_verify.verify_hf`."""

    source: str
    model_type: str
    config: Any
    dtype: str
    exact: bool
    weights: str
    tokens: list[int]
    #: the exact-arithmetic patches applied (:data:`~nlaverify.interop.hf_patches.
    #: EXACT_PATCHES`; all of them when ``exact``)
    patches: list[str] = field(default_factory=list)
    plant: str | None = None
    planted: str | None = None
    rows: list[HFNodeRow] = field(default_factory=list)
    gradients: list[HFCheck] = field(default_factory=list)
    checks: list[HFCheck] = field(default_factory=list)
    #: graph op nodes HF exposes no value for (e.g. ``k_shared``: ``repeat_kv`` runs
    #: inside HF's attention)
    unmapped: list[str] = field(default_factory=list)
    #: the first node, in topological order, whose HF value is beyond its bound
    first_divergence: str | None = None
    #: the first parameter (HF state-dict key, in params_to_hf's order) whose gradient is
    #: beyond its bound
    first_gradient_divergence: str | None = None
    #: stock mode on a float64 model: the first node beyond the bound of float32, the
    #: precision stock HF drops to (None: every departure is float32 rounding)
    first_beyond_float32: str | None = None
    #: exact mode: the graph node of the first patched HF module whose stock code differs
    #: from its exact replacement beyond float32's bound (a bug the patch would hide)
    first_patch_divergence: str | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and all(g.ok for g in self.gradients) and all(
            c.ok for c in self.checks)

    @property
    def stock_ok(self) -> bool:
        r"""Stock mode on a float64 model: every node, the loss and every gradient within
        float32's bound (the precision stock HF computes its RMSNorms, RoPE angles, softmax
        and loss in), and every check ok: a healthy model whose only departures from float64
        are HF's own float32 rounding. ``False`` in exact mode (judged by :attr:`ok`)."""
        return (not self.exact and self.dtype == "float64" and bool(self.rows)
                and all(r.ok32 for r in self.rows) and all(g.ok32 for g in self.gradients)
                and all(c.ok for c in self.checks))

    @property
    def verdict(self) -> bool:
        """The exit status's verdict: :attr:`ok`, or :attr:`stock_ok` in stock mode."""
        return self.ok or self.stock_ok

    def row(self, node: str) -> HFNodeRow:
        """The row of graph node ``node``."""
        for r in self.rows:
            if r.node == node:
                return r
        raise UnknownNameError(f"HFVerifyReport.row: no row for node {node!r}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-able (non-finite errors stay floats: write with :mod:`nlaverify.jsonout`)."""
        def rows(items: list[Any]) -> list[dict[str, Any]]:
            return [{**{k: getattr(r, k) for k in r.__dataclass_fields__}, "ok": r.ok}
                    for r in items]

        return {"ok": self.ok, "stock_ok": self.stock_ok, "verdict": self.verdict,
                "source": self.source, "model_type": self.model_type,
                "config": self.config.as_dict(), "dtype": self.dtype, "exact": self.exact,
                "patches": list(self.patches),
                "weights": self.weights, "tokens": list(self.tokens), "plant": self.plant,
                "planted": self.planted, "first_divergence": self.first_divergence,
                "first_gradient_divergence": self.first_gradient_divergence,
                "first_beyond_float32": self.first_beyond_float32,
                "first_patch_divergence": self.first_patch_divergence,
                "nodes": rows(self.rows), "gradients": rows(self.gradients),
                "checks": rows(self.checks), "unmapped": list(self.unmapped)}


def format_hf_report(report: HFVerifyReport, per_node: bool = True) -> str:
    """A table of node errors and bounds (error/bound <= 1 passes), the gradients, and a
    summary naming the first divergent node."""
    mode = "exact" if report.exact else (
        f"stock but {'+'.join(report.patches)}" if report.patches else "stock")
    lines = [f"Hugging Face {report.model_type} ({report.source}; {report.dtype}, {mode} "
             f"arithmetic) vs the nlaverify graph; weights: {report.weights}; "
             f"tokens {report.tokens}"]
    if report.planted:
        lines.append(f"planted mistake {report.plant!r}: {report.planted}")
    if report.stock_ok:  # healthy: one line, not a table of float32 departures
        first = report.first_divergence
        rounded = sum(not r.ok for r in report.rows)
        lines.append(f"verify --hf {report.model_type}: ok within float32 rounding "
                     f"({len(report.rows)} nodes, {len(report.gradients)} gradients; stock HF "
                     f"computes some steps in float32: {rounded} nodes and "
                     f"{sum(not g.ok for g in report.gradients)} gradients depart from "
                     f"float64, the first at {first}, all within float32's bound; "
                     f"--hf-exact for float64 agreement)")
        return "\n".join(lines)
    if per_node:
        lines.append(f"{'node':<28} {'op':<18} {'error':>10} {'bound':>10} {'ratio':>9}  HF")
        for r in report.rows:
            flag = "" if r.ok else ("  (float32 rounding)" if r.ok32 else "  <- FAIL")
            lines.append(f"{r.node:<28} {r.op:<18} {r.error:10.2e} {r.bound:10.2e} "
                         f"{r.error / r.bound:9.2e}  {r.hf}{flag}"
                         + (f" ({r.note})" if r.note else ""))
    bad = [g for g in report.gradients if not g.ok32]
    worst = max(report.gradients, key=lambda g: g.error / g.bound, default=None)
    if worst is not None:
        lines.append(f"gradients: {len(report.gradients) - len(bad)}/{len(report.gradients)} "
                     f"parameters within bound; worst {worst.name} error {worst.error:.2e} "
                     f"bound {worst.bound:.2e}")
    for g in bad[:10]:
        lines.append(f"  gradient {g.name}: error {g.error:.2e} bound {g.bound:.2e}: FAIL")
    fidelity = [c for c in report.checks if c.name.startswith("patch fidelity")]
    for c in report.checks:
        if c in fidelity and c.ok:
            continue  # summarised below; failures listed
        lines.append(f"{c.name}: error {c.error:.2e} bound {c.bound:.2e}: "
                     f"{'ok' if c.ok else 'FAIL'}")
    if fidelity:
        worst_f = max(fidelity, key=lambda c: c.error / c.bound)
        lines.append(f"patch fidelity (HF's stock code vs each exact replacement, float32's "
                     f"bound): {sum(c.ok for c in fidelity)}/{len(fidelity)} calls within "
                     f"bound; worst ratio {worst_f.error / worst_f.bound:.2e} "
                     f"({worst_f.name.split(':')[0].removeprefix('patch fidelity ')})")
    if report.unmapped:
        lines.append(f"graph nodes HF does not expose: {', '.join(report.unmapped)}")
    if not per_node and report.first_divergence is not None:
        r = report.row(report.first_divergence)
        lines.append(f"first divergent node {r.node} ({r.op}, HF {r.hf}): error "
                     f"{r.error:.2e} bound {r.bound:.2e}")
    if report.ok:
        lines.append(f"verify --hf {report.model_type}: ok ({len(report.rows)} nodes, "
                     f"{len(report.gradients)} gradients)")
        return "\n".join(lines)
    lines.append(f"verify --hf {report.model_type}: FAIL; first divergent node: "
                 f"{report.first_divergence}; first divergent gradient: "
                 f"{report.first_gradient_divergence}"
                 + (f"; HF's own code beyond float32 where patched: "
                    f"{report.first_patch_divergence}" if report.first_patch_divergence
                    else ""))
    if report.dtype == "float64" and not report.exact and report.first_divergence:
        grad32 = next((g.name for g in report.gradients if not g.ok32), None)
        lines.append("stock arithmetic: " + (
            f"the first node beyond even float32's bound is {report.first_beyond_float32}"
            if report.first_beyond_float32 else
            "every node is within float32's bound (HF computes some steps in float32)")
            + (f"; the first gradient beyond it: {grad32}" if grad32 else ""))
    return "\n".join(lines)
