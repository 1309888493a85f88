"""The whole-pipeline cross-check behind ``nlaverify verify --preset``.

Subjects: the graph evaluated and back-propagated (hand-derived VJPs) on each
requested backend; the lowered jit; the independent JAX model. Reference: JAX
autodiff of the graph's forward (values and every node's cotangent), so no
hand-derived VJP checks itself. Every bound comes from the tolerance model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlaverify.backends import BackendUnavailable, to_float64
from nlaverify.config import TransformerConfig
from nlaverify.graph.build import build_transformer
from nlaverify.graph.compare import (
    GraphComparison,
    accumulation_length,
    compare,
    jax_local_reference,
)
from nlaverify.graph.run import (
    autodiff_reference,
    check_run_size,
    init_params,
    run_graph,
    sample_data,
)
from nlaverify.tolerance import magnitude_condition, tolerance


@dataclass
class PipelineReport:
    """Per-node comparisons of each backend, and the end-to-end checks."""

    config: TransformerConfig
    comparisons: list[GraphComparison] = field(default_factory=list)
    end_to_end: list[tuple[str, str, float, float]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: backends whose run raised: ``(backend, "ExceptionType: message")``; each fails alone
    errors: list[tuple[str, str]] = field(default_factory=list)
    #: when the independent model disagrees: the first graph node (topological order)
    #: whose value the model's matching intermediate does not reproduce, ``"loss"`` when
    #: only the loss differs, or None (no mapped value differs: the gradients do)
    model_divergence: str | None = None

    @property
    def ok(self) -> bool:
        """No error, every comparison and end-to-end check within its bound, and at least
        one requested backend compared (every one skipped checked nothing that was asked:
        ``verify --preset tiny --backends cupy`` without a GPU fails, as ``verify --backends
        cupy`` does)."""
        asked_nothing_ran = bool(self.skipped) and not self.comparisons
        return not self.errors and not asked_nothing_ran and all(
            c.ok for c in self.comparisons) and all(e <= b for _, _, e, b in self.end_to_end)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "config": self.config.as_dict(),
                "comparisons": [c.as_dict() for c in self.comparisons],
                "end_to_end": [{"subject": s, "quantity": q, "error": e, "bound": b}
                               for s, q, e, b in self.end_to_end],
                "skipped": [{"backend": b, "reason": r} for b, r in self.skipped],
                "errors": [{"backend": b, "error": r} for b, r in self.errors],
                "model_first_divergence": self.model_divergence}


def _to_np(x: Any) -> np.ndarray:
    return to_float64(x)


def verify_pipeline(config: TransformerConfig, backends: Sequence[str] = ("numpy", "jax",
                                                                          "mpmath"),
                    seed: int = 0, n: int = 6, digits: int = 50,
                    batch: int | None = None) -> PipelineReport:
    """Run every subject on one seeded input and compare with the autodiff reference.

    ``n`` is the sequence length (``1 <= n <= context``); ``batch`` gives ``batch`` right-padded
    sequences (see :func:`~nlaverify.graph.run.sample_data`) instead of one.
    """
    import jax.numpy as jnp

    from nlaverify.graph.lower import lower
    from nlaverify.models.jax_transformer import make_value_grad_and_logits

    check_run_size(config, n, batch)
    graph = build_transformer(config)
    params = init_params(graph, seed)
    # right padding is invisible to real positions only under causal attention (there is
    # no key-padding mask): a bidirectional model gets full-length sequences
    data = sample_data(config.vocab_size, n, seed, batch=batch, pad=config.causal)
    report = PipelineReport(config)
    try:
        reference = autodiff_reference(graph, params, data)
    except Exception as exc:  # nothing can be compared without it: one failed row
        report.errors.append(("jax-autodiff reference", _describe(exc)))
        return report
    local = jax_local_reference(graph, reference)
    for backend in dict.fromkeys(backends):  # each backend once, in the given order
        try:
            ev = run_graph(graph, backend, params, data, digits=digits if backend == "mpmath"
                           else None, jit=backend == "jax")
        except BackendUnavailable as exc:
            report.skipped.append((backend, str(exc)))
            continue
        except Exception as exc:  # the backend fails on its own row; the others still run
            report.errors.append((backend, _describe(exc)))
            continue
        report.comparisons.append(compare(graph, ev, reference, local_reference=local))
    # end to end: lowered jit and the independent model, on loss, logits, all gradients
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    jd = {k: jnp.asarray(v) for k, v in data.items()}
    k = accumulation_length(graph, n)
    depth = 2 * (4 * config.n_blocks + 6)
    ref_logits = _to_np(reference.values["logits_tempered" if "logits_tempered" in
                                        reference.values else "logits"])
    ref_loss = _to_np(reference.values["loss"])
    ref_grads = {p: _to_np(reference.cotangents[p]) for p in params}

    def lowered() -> tuple[Any, Any, Any]:
        loss_l, grads_l, logits_l = lower(graph, outputs=("logits",))(jp, jd)
        if "logits_tempered" in reference.values:
            logits_l = logits_l / config.temperature
        return loss_l, logits_l, grads_l

    def model() -> tuple[Any, Any, Any]:
        (loss_m, logits_m), grads_m = make_value_grad_and_logits(config)(jp, jd["tokens"],
                                                                         jd["targets"])
        return loss_m, logits_m, grads_m

    for label, run in (("lowered jit", lowered), ("independent JAX model", model)):
        try:
            loss_v, logits_v, grads = run()
        except Exception as exc:  # a failed subject is its own row
            report.errors.append((label, _describe(exc)))
            continue
        for what, a, e in (("loss", loss_v, ref_loss), ("logits", logits_v, ref_logits)):
            tol = tolerance("float64", size=k, depth=depth, condition=magnitude_condition(
                e, power=1))
            c = tol.compare(a, e)
            report.end_to_end.append((label, what, c.normwise, tol.rtol))
        ratio, worst, bound = -1.0, 0.0, math.inf
        for p, g_ref in ref_grads.items():
            tol = tolerance("float64", size=k, depth=depth, condition=magnitude_condition(
                params[p], power=1))
            c = tol.compare(grads[p], g_ref)
            if c.normwise / tol.rtol > ratio:
                ratio, worst, bound = c.normwise / tol.rtol, c.normwise, tol.rtol
        report.end_to_end.append((label, f"all {len(ref_grads)} parameter gradients", worst,
                                  bound))
    if _model_failed(report):
        report.model_divergence = _first_model_divergence(graph, reference, jp, jd, config, k,
                                                          depth)
    return report


def _describe(exc: Exception) -> str:
    """``"Type: message (notes)"``: the notes name the graph node where it happened."""
    notes = "; ".join(getattr(exc, "__notes__", ()))
    return f"{type(exc).__name__}: {exc}" + (f" ({notes})" if notes else "")


def _model_failed(report: PipelineReport) -> bool:
    return any(s == "independent JAX model" and e > b for s, _, e, b in report.end_to_end)


def _first_model_divergence(graph: Any, reference: Any, jp: dict[str, Any],
                            jd: dict[str, Any], config: TransformerConfig, k: int,
                            depth: int) -> str | None:
    """The first node, in topological order, where the independent model's intermediate
    (:func:`nlaverify.models.jax_transformer.intermediates`) and the reference value part,
    judged with the end-to-end bound of the tolerance model; then the loss."""
    import networkx as nx

    from nlaverify.models.jax_transformer import intermediates

    rec = intermediates(jp, jd["tokens"], config, jd["targets"])
    for node in nx.topological_sort(graph):
        if node not in rec or node not in reference.values:
            continue
        e = _to_np(reference.values[node])
        tol = tolerance("float64", size=k, depth=depth, condition=magnitude_condition(
            e, power=1))
        if np.shape(rec[node]) != e.shape or not tol.compare(rec[node], e).ok:
            return node
    return None


def format_report(report: PipelineReport, per_node: bool = True) -> str:
    """Per-node table (error/bound ratios; <= 1 passes) and a summary."""
    lines = []
    if per_node and report.comparisons:
        heads = [c.subject for c in report.comparisons]
        lines.append(f"{'node':<28} {'op':<20} " + " ".join(f"{h + ' val':>13} {h + ' cot':>13}"
                                                            for h in heads))
        rows = {r.node: r for r in report.comparisons[0].rows}
        for node, r0 in rows.items():
            cells = []
            for c in report.comparisons:
                r = next((x for x in c.rows if x.node == node), None)
                if r is None:
                    cells += ["", ""]
                    continue
                cells.append(f"{r.value_error / r.value_bound:13.2e}")
                cells.append(f"{r.cot_error / r.cot_bound:13.2e}" if r.cot_error is not None
                             and r.cot_bound else f"{'':>13}")
            lines.append(f"{node:<28} {r0.op:<20} " + " ".join(cells))
        lines.append("(entries are error / bound; a check passes when <= 1)")
    for c in report.comparisons:
        status = "ok" if c.ok else "FAIL"
        extra = "" if c.ok else (
            f"; first divergent value: {c.first_value_divergence}; first divergent cotangent "
            f"(back-propagation order): {c.first_cotangent_divergence}; faulty VJP at node: "
            f"{c.faulty_vjp}" + (f"; cotangent accumulation fault at node: "
                                 f"{c.faulty_accumulation}" if c.faulty_accumulation else ""))
        lines.append(f"graph on {c.subject:<10} vs {c.reference}: {len(c.rows)} nodes, worst "
                     f"error/bound {c.worst():.2e}: {status}{extra}")
    for subject, what, err, bound in report.end_to_end:
        lines.append(f"{subject:<22} {what:<34} error {err:.2e} bound {bound:.2e}: "
                     f"{'ok' if err <= bound else 'FAIL'}")
    if _model_failed(report):
        lines.append("independent JAX model: " + (
            f"first divergence at {report.model_divergence}" if report.model_divergence else
            "no mapped intermediate and not the loss diverges (the gradients do)"))
    for subject, error in report.errors:
        where = subject if subject in ("lowered jit", "independent JAX model",
                                       "jax-autodiff reference") else f"graph on {subject}"
        lines.append(f"{where:<19} FAIL ({error})")
    for backend, reason in report.skipped:
        lines.append(f"graph on {backend:<10} SKIPPED ({reason})")
    passed = sum(c.ok for c in report.comparisons) + sum(e <= b for _, _, e, b in
                                                        report.end_to_end)
    failed = len(report.comparisons) + len(report.end_to_end) + len(report.errors) - passed
    lines.append(f"pipeline {report.config.name}: {passed} passed, {failed} failed, "
                 f"{len(report.skipped)} skipped")
    return "\n".join(lines)
