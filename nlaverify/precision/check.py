r"""The check itself: rounded parameters, the float64 reference, the run in ``dtype``, the
per-node rows and reports (see :mod:`nlaverify.precision`). The TF32 policy and the planted
float16 node live in :mod:`nlaverify.precision.emulate` and are re-exported here."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from nlaverify import jsonout
from nlaverify.backends import get_namespace
from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.graph.build import build_transformer
from nlaverify.graph.core import backprop, evaluate
from nlaverify.graph.run import (
    Evaluation,
    autodiff_reference,
    check_run_size,
    graph_inputs,
    init_params,
    sample_data,
)
from nlaverify.precision.bounds import (
    DTYPES,
    MATMUL_PRECISIONS,
    NodeBound,
    block_of,
    graph_depths,
    node_bounds,
)
from nlaverify.precision.emulate import (
    emulate_tf32,
    matmul_precision_scope,
    planted,
    round_tf32,
)
from nlaverify.precision.local import decide, local_tolerances

__all__ = [
    "KNOWN_ZERO_COTANGENTS", "PrecisionReport", "PrecisionRow", "PrecisionSetup", "emulate_tf32",
    "format_precision_report", "matmul_precision_scope", "measure", "planted", "precision_command",
    "prepare", "round_params", "round_tf32", "run_subject", "verify_precision",
]


@dataclass(frozen=True)
class PrecisionRow:
    """One node: normwise relative errors against the float64 reference, and bounds."""

    node: str
    op: str
    #: longest path from the inputs (forward depth)
    depth: int
    #: longest path to the output (back-propagation depth)
    height: int
    block: int | None
    value_error: float
    value_bound: float
    value_stages: float
    value_condition: float
    cot_error: float | None = None
    cot_bound: float | None = None
    cot_stages: float | None = None
    cot_condition: float | None = None

    @property
    def value_ratio(self) -> float:
        return _ratio(self.value_error, self.value_bound)

    @property
    def cot_ratio(self) -> float | None:
        if self.cot_error is None or self.cot_bound is None:
            return None
        return _ratio(self.cot_error, self.cot_bound)

    @property
    def value_ok(self) -> bool:
        """The value passed: within a bound that resolves it (below 1)."""
        return self.value_error <= self.value_bound and not self.vacuous("value")

    @property
    def cot_ok(self) -> bool:
        """The cotangent passed (or there is none): within a bound below 1."""
        return self.cot_error is None or (self.cot_error <= (self.cot_bound or 0.0)
                                          and not self.vacuous("cotangent"))

    @property
    def value_failed(self) -> bool:
        """The value is over its bound: a failure, vacuous bound or not."""
        return self.value_error > self.value_bound

    @property
    def cot_failed(self) -> bool:
        """The cotangent is over its bound: a failure, vacuous bound or not."""
        return self.cot_error is not None and self.cot_error > (self.cot_bound or 0.0)

    @property
    def failed(self) -> bool:
        """A value or cotangent over its bound."""
        return self.value_failed or self.cot_failed

    @property
    def inconclusive(self) -> bool:
        """Nothing over its bound, but a bound that cannot resolve its check
        (:meth:`vacuous`): neither a pass nor a failure (``check_op``'s convention,
        :func:`nlaverify.check.report.inconclusive_row`)."""
        return not self.ok and not self.failed

    def vacuous(self, what: str) -> bool:
        """A bound of 1 or more on a normwise *relative* error admits any answer of the
        right size (a zeroed VJP included): an error within it is *inconclusive*, never a
        pass (and an error over it still fails), except for the key biases' cotangents,
        which are exactly 0 (softmax is invariant to a per-row shift of the scores: lemma
        ``softmax_shift_invariance``), so that only rounding is left to measure."""
        bound = self.value_bound if what == "value" else self.cot_bound
        if bound is None or bound < 1.0:
            return False
        return not (what == "cotangent" and self.node.endswith(KNOWN_ZERO_COTANGENTS))

    @property
    def ok(self) -> bool:
        return self.value_ok and self.cot_ok

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(value_ratio=self.value_ratio, cot_ratio=self.cot_ratio, ok=self.ok,
                 failed=self.failed, inconclusive=self.inconclusive)
        return d


#: parameter nodes whose cotangent is exactly zero (see :meth:`PrecisionRow.vacuous`)
KNOWN_ZERO_COTANGENTS = (".attn.k.b_K",)


def _ratio(err: float, bound: float) -> float:
    if err == 0.0:
        return 0.0
    return err / bound if bound > 0 else math.inf


@dataclass
class PrecisionReport:
    """The outcome of :func:`verify_precision`."""

    preset: str
    dtype: str
    backend: str
    matmul_precision: str
    accumulation: str
    n: int
    seed: int
    rows: list[PrecisionRow] = field(default_factory=list)
    first_value_divergence: str | None = None
    first_cotangent_divergence: str | None = None
    #: ``node (value|cotangent): dtype`` for every array not held in ``dtype``
    promoted: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        """Rows whose every check is within a bound below 1."""
        return sum(r.ok for r in self.rows)

    @property
    def failed(self) -> int:
        """Rows with a value or cotangent over its bound."""
        return sum(r.failed for r in self.rows)

    @property
    def inconclusive(self) -> int:
        """Rows with nothing over its bound but a bound of 1 or more
        (:attr:`PrecisionRow.inconclusive`): neither passed nor failed."""
        return len(self.rows) - self.passed - self.failed

    @property
    def ok(self) -> bool:
        """Every row passed: none failed, none inconclusive (as ``CheckReport.ok``: an
        inconclusive row tested nothing) and every array kept ``dtype``."""
        return self.passed == len(self.rows) and not self.promoted

    def ratios(self, what: str = "value", *, meaningful: bool = True) -> list[float]:
        """Error/bound ratios of the computed values (``what="value"``) or of the
        cotangents (``"cotangent"``), exact nodes left out; with ``meaningful`` also the
        nodes whose bound is at least 1 (zero up to rounding, nothing to compare)."""
        out = []
        for r in self.rows:
            e, b = (r.value_error, r.value_bound) if what == "value" else (r.cot_error,
                                                                            r.cot_bound)
            if e is None or b is None or b == 0.0 or (meaningful and b >= 1.0):
                continue
            out.append(e / b)
        return out

    def summary(self) -> dict[str, Any]:
        s: dict[str, Any] = {}
        for what in ("value", "cotangent"):
            r = self.ratios(what)
            s[what] = {"nodes": len(r), "median_ratio": float(np.median(r)) if r else 0.0,
                       "worst_ratio": max(r, default=0.0),
                       "not_meaningful": len(self.ratios(what, meaningful=False)) - len(r)}
        s.update(first_value_divergence=self.first_value_divergence,
                 first_cotangent_divergence=self.first_cotangent_divergence,
                 passed=self.passed, failed=self.failed, inconclusive=self.inconclusive,
                 promoted=self.promoted, ok=self.ok)
        return s

    def as_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "dtype": self.dtype, "backend": self.backend,
                "matmul_precision": self.matmul_precision, "accumulation": self.accumulation,
                "n": self.n, "seed": self.seed, "summary": self.summary(),
                "timings": self.timings, "rows": [r.as_dict() for r in self.rows]}


def _np_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import jax.numpy as jnp

        return jnp.bfloat16  # ml_dtypes' bfloat16, a NumPy dtype
    return np.dtype(dtype)


def round_params(params: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Parameters rounded to ``dtype`` and held, exactly, in float64."""
    t = _np_dtype(dtype)
    return {k: np.asarray(v).astype(t).astype(np.float64) for k, v in params.items()}


@dataclass
class PrecisionSetup:
    """Everything of a precision check but the subject run: graph, rounded parameters,
    data, the float64 reference and the per-node bounds."""

    config: TransformerConfig
    graph: nx.DiGraph
    dtype: str
    backend: str
    matmul_precision: str
    accumulation: str
    n: int
    seed: int
    params: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    reference: Evaluation
    bounds: dict[str, NodeBound]
    timings: dict[str, float] = field(default_factory=dict)


_SETUPS: dict[tuple, PrecisionSetup] = {}
_SETUP_CACHE_SIZE = 4


def prepare(
    config: TransformerConfig, dtype: str, *, backend: str | None = None, seed: int = 0,
    n: int = 6, matmul_precision: str = "highest", accumulation: str | None = None,
    batch: int | None = None,
) -> PrecisionSetup:
    """Build the graph, draw and round the parameters, compute the float64 reference and
    the bounds (see :func:`verify_precision` for the arguments). The last few setups are
    kept: a second check of the same configuration (another backend, a planted node)
    reuses its reference and bounds."""
    if dtype not in DTYPES:
        raise ArgumentError(f"verify_precision: argument 'dtype': expected one of "
                            f"{', '.join(DTYPES)}, got {dtype!r}")
    if matmul_precision not in MATMUL_PRECISIONS:
        raise ArgumentError(f"verify_precision: argument 'matmul_precision': expected one of "
                            f"{', '.join(MATMUL_PRECISIONS)}, got {matmul_precision!r}")
    backend = backend or ("jax" if dtype == "bfloat16" else "numpy")
    if backend not in ("numpy", "jax") or (dtype == "bfloat16" and backend != "jax"):
        raise ArgumentError(f"verify_precision: argument 'backend': {dtype} runs on "
                            f"{'jax' if dtype == 'bfloat16' else 'numpy or jax'}, got "
                            f"{backend!r}")
    accumulation = accumulation or _default_accumulation(dtype, backend)
    check_run_size(config, n, batch)
    key = (config, config.name, dtype, seed, n, batch, matmul_precision, accumulation)
    if key in _SETUPS:
        return dataclasses.replace(_SETUPS[key], backend=backend, timings={
            k: 0.0 for k in _SETUPS[key].timings})
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    graph = build_transformer(config)
    params = round_params(init_params(graph, seed), dtype)
    data = sample_data(config.vocab_size, n, seed, batch=batch, pad=config.causal)
    reference = autodiff_reference(graph, params, data)
    timings["reference"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    bounds = node_bounds(graph, reference, dtype, n, rows=n * (batch or 1),
                         accumulation=accumulation,
                         products="tfloat32" if matmul_precision == "tf32" else None,
                         seed=seed)
    timings["bounds"] = time.perf_counter() - t0
    setup = PrecisionSetup(config, graph, dtype, backend, matmul_precision, accumulation, n,
                           seed, params, data, reference, bounds, timings)
    while len(_SETUPS) >= _SETUP_CACHE_SIZE:
        _SETUPS.pop(next(iter(_SETUPS)))
    _SETUPS[key] = setup
    return dataclasses.replace(setup, timings=dict(timings))


def run_subject(setup: PrecisionSetup, graph: nx.DiGraph | None = None, xp: Any = None,
                output: str = "loss") -> Evaluation:
    """Evaluate and back-propagate ``graph`` (default: the setup's) in the setup's dtype,
    on its backend (or on the namespace ``xp``, e.g. :func:`emulate_tf32`), JAX's matmul
    precision pinned by :func:`matmul_precision_scope`."""
    graph = setup.graph if graph is None else graph
    xp = get_namespace(setup.backend) if xp is None else xp
    with matmul_precision_scope(getattr(xp, "name", setup.backend), setup.matmul_precision):
        inputs = graph_inputs(graph, xp, setup.params, setup.data, setup.dtype)
        values = evaluate(graph, xp, inputs)
        cot = backprop(graph, xp, values, output)
    return Evaluation(f"{setup.backend}-{setup.dtype}", setup.dtype, values, cot)


def measure(setup: PrecisionSetup, subject: Evaluation) -> PrecisionReport:
    """Compare ``subject`` with the setup's reference node by node. Each row has the stage
    model's bound and the a-posteriori one (its op's running error bound at the run's own
    inputs plus the exact effect of their errors, :mod:`nlaverify.precision.local`); the
    latter decides where it is below 1 (:func:`~nlaverify.precision.local.decide`). Rows
    report the stage model's stages and condition either way."""
    t0 = time.perf_counter()
    g, ref = setup.graph, setup.reference
    depth, height = graph_depths(g)
    rep = PrecisionReport(setup.config.name, setup.dtype, setup.backend,
                          setup.matmul_precision, setup.accumulation, setup.n, setup.seed,
                          timings=dict(setup.timings))
    order = list(nx.topological_sort(g))
    # every row's a-posteriori bound at the run's own inputs (local.py)
    local = local_tolerances(g, ref, subject, setup.dtype, setup.accumulation,
                             "tfloat32" if setup.matmul_precision == "tf32" else None)
    for v in order:
        attrs = g.nodes[v]
        if attrs.get("dtype") == "int" or v not in subject.values:
            continue
        for what, arr in (("value", subject.values.get(v)),
                          ("cotangent", subject.cotangents.get(v))):
            dt = getattr(arr, "dtype", None)
            if dt is not None and str(dt) != setup.dtype:
                rep.promoted.append(f"{v} ({what}): {dt}")
        b = setup.bounds[v]
        b = dataclasses.replace(b, value=decide(b.value, local.get((v, "value"))),
                                cotangent=decide(b.cotangent, local.get((v, "cotangent"))))
        vc = b.value.compare(subject.values[v], ref.values[v], floor=0.0)
        ce = None
        if b.cotangent is not None and v in subject.cotangents and v in ref.cotangents:
            ce = b.cotangent.compare(subject.cotangents[v], ref.cotangents[v],
                                     floor=0.0).normwise
        row = PrecisionRow(v, attrs.get("op", attrs["kind"]), depth[v], height[v],
                           block_of(g, v),
                           vc.normwise, b.value.rtol, b.value_stages, b.value_condition,
                           ce, None if ce is None else b.cotangent.rtol,  # type: ignore[union-attr]
                           None if ce is None else b.cot_stages,
                           None if ce is None else b.cot_condition)
        rep.rows.append(row)
        if row.value_failed and rep.first_value_divergence is None:
            rep.first_value_divergence = v
    by_node = {r.node: r for r in rep.rows}
    for v in reversed(order):  # back-propagation order
        r = by_node.get(v)
        if r is not None and r.cot_failed:
            rep.first_cotangent_divergence = v
            break
    rep.timings["compare"] = time.perf_counter() - t0
    return rep


def verify_precision(
    config: TransformerConfig, dtype: str, backend: str | None = None, seed: int = 0,
    n: int = 6, *, matmul_precision: str = "highest", accumulation: str | None = None,
    plant: str | None = None, batch: int | None = None,
) -> PrecisionReport:
    """Run ``config``'s graph in ``dtype`` and compare every node with float64 autodiff.

    Args:
        dtype: ``"float32"`` or ``"bfloat16"``.
        backend: ``"numpy"`` (float32 only) or ``"jax"``; default numpy for float32, jax
            for bfloat16.
        seed, n: the parameters' seed and the sequence length (``1 <= n <= context``).
        batch: ``batch`` right-padded sequences instead of one (see
            :func:`~nlaverify.graph.run.sample_data`).
        matmul_precision: ``"highest"`` (pinned full-precision float32 products) or
            ``"tf32"`` (JAX's ``"tensorfloat32"``, modelled with :math:`u_p = 2^{-11}`).
        accumulation: the accumulation precision of the model (default: float32 for
            bfloat16 on JAX, else ``dtype``).
        plant: a node whose op is replaced by a float16 version (:func:`planted`): the
            check must name it as the first divergent value.
    """
    setup = prepare(config, dtype, backend=backend, seed=seed, n=n,
                    matmul_precision=matmul_precision, accumulation=accumulation, batch=batch)
    t0 = time.perf_counter()
    if plant is None:
        subject = run_subject(setup)
    else:
        with planted(setup.graph, plant) as g:
            subject = run_subject(setup, g)
    setup.timings["subject"] = time.perf_counter() - t0
    return measure(setup, subject)


def precision_command(preset_name: str, dtype: str, backends: Sequence[str], *,
                      seed: int = 0, n: int = 6, as_json: bool = False,
                      batch: int | None = None) -> int:
    """``nlaverify verify --preset NAME --dtype DTYPE``: one check per backend of
    ``backends`` that runs ``dtype`` (float32: numpy, jax; bfloat16: jax), sharing the
    reference and bounds; prints the tables (or JSON); returns the exit status."""
    from nlaverify.config import preset

    runs = [b for b in backends if b in (("jax",) if dtype == "bfloat16" else ("numpy", "jax"))]
    if not runs:
        raise ArgumentError(f"verify: --dtype {dtype} runs on "
                            f"{'jax' if dtype == 'bfloat16' else 'numpy or jax'}; none of "
                            f"--backends {','.join(backends)} does")
    reports: list[PrecisionReport] = []
    for backend in runs:
        setup = prepare(preset(preset_name), dtype, backend=backend, seed=seed, n=n,
                        batch=batch)
        t0 = time.perf_counter()
        subject = run_subject(setup)
        setup.timings["subject"] = time.perf_counter() - t0
        reports.append(measure(setup, subject))
    ok = all(r.ok for r in reports)
    passed, failed = sum(r.passed for r in reports), sum(r.failed for r in reports)
    inconclusive = sum(r.inconclusive for r in reports)
    if as_json:
        jsonout.dump({"ok": ok, "passed": passed, "failed": failed,
                      "inconclusive": inconclusive, "reports": [r.as_dict() for r in reports]})
    else:
        for r in reports:
            print(format_precision_report(r, closing=len(reports) == 1))
        if len(reports) > 1:
            print(f"precision {preset_name} {dtype}: {passed} passed, {failed} failed"
                  + (f", {inconclusive} inconclusive" if inconclusive else ""))
    # an inconclusive row is not a pass: exit 1, as `check` does for CheckReport.ok
    return 0 if ok else 1


def _default_accumulation(dtype: str, backend: str) -> str:
    # XLA accumulates bfloat16 dots and jnp.sum in float32
    return "float32" if (dtype == "bfloat16" and backend == "jax") else dtype


def _fmt(x: float | None) -> str:
    return f"{'':>9}" if x is None else f"{x:9.2e}"


def format_precision_report(rep: PrecisionReport, per_node: bool = True,
                            closing: bool = True) -> str:
    """Per-node table, summary, and the closing line ``precision NAME DTYPE: ...``."""
    lines = []
    if per_node:
        lines.append(f"{'node':<28} {'op':<21} {'val err':>9} {'bound':>9} {'ratio':>9}   "
                     f"{'cot err':>9} {'bound':>9} {'ratio':>9}")
        for r in rep.rows:
            flag = "" if r.ok else ("  FAIL" if r.failed else "  INCONCLUSIVE (bound >= 1)")
            lines.append(f"{r.node:<28} {r.op:<21} {_fmt(r.value_error)} {_fmt(r.value_bound)} "
                         f"{_fmt(r.value_ratio)}   {_fmt(r.cot_error)} {_fmt(r.cot_bound)} "
                         f"{_fmt(r.cot_ratio)}{flag}")
        lines.append("(normwise relative errors against float64 JAX autodiff; a check "
                     "passes when error <= bound < 1, fails when error > bound, and is "
                     "inconclusive when error <= bound and bound >= 1)")
    s = rep.summary()
    pin = ("matmuls pinned to full float32 ('highest', no TF32)" if rep.matmul_precision ==
           "highest" else "TF32 matmuls, modelled with u_prod = 2^-11")
    lines.append(f"{rep.preset} in {rep.dtype} on {rep.backend} (n={rep.n}, seed={rep.seed}, "
                 f"accumulation {rep.accumulation}; {pin})")
    for what in ("value", "cotangent"):
        w = s[what]
        extra = (f"; {w['not_meaningful']} zero up to rounding (bound >= 1) left out"
                 if w["not_meaningful"] else "")
        lines.append(f"  {what + 's':<10} error/bound over {w['nodes']} nodes: median "
                     f"{w['median_ratio']:.2e}, worst {w['worst_ratio']:.2e}{extra}")
    if rep.first_value_divergence or rep.first_cotangent_divergence:
        lines.append(f"  first value over its bound: {rep.first_value_divergence}; first "
                     f"cotangent over its bound (back-propagation order): "
                     f"{rep.first_cotangent_divergence}")
    if rep.promoted:
        lines.append(f"  dtype not kept ({len(rep.promoted)}): " + ", ".join(rep.promoted[:8]))
    inc = f", {rep.inconclusive} inconclusive" if rep.inconclusive else ""
    if closing:
        lines.append(f"precision {rep.preset} {rep.dtype}: {rep.passed} passed, {rep.failed} "
                     f"failed{inc}")
    else:
        lines.append(f"  {rep.backend}: {rep.passed} passed, {rep.failed} failed{inc}")
    return "\n".join(lines)


# --- the figure -------------------------------------------------------------------


