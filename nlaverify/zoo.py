r"""A deterministic zoo of small Transformers in which every configuration field counts.

A consistent bug (the same mistake in an op's forward and in its VJP, or in the
graph builder) survives every exact proof and every graph-versus-autodiff check:
only the independent model (:mod:`nlaverify.models.jax_transformer`) can see it, and
only on a configuration where the faulty feature is switched on *and* its effect is
large. The zoo is that set of configurations:

* :data:`ZOO`: named :class:`~nlaverify.config.TransformerConfig`\ s in which every
  field takes a non-default value at least once (:func:`zoo_coverage` checks it) and
  every branch of the builder is taken (dense and routed ReLU, GELU and SwiGLU MLPs;
  learned, sinusoidal, rotary and no positions; LayerNorm and RMSNorm, each before and
  after the sublayer, Baggag & Saad §3.8-3.9), with values chosen so that each field's
  effect is far above the rounding error: grouped-query attention with several
  key/value heads *and* :math:`n_{\text{rep}} = 2` (with one key/value head, reading
  head :math:`k \bmod h_{kv}` instead of :math:`\lfloor k/n_{\text{rep}}\rfloor` is
  invisible), :math:`k = 1` and :math:`k = 2` of :math:`E \ge 3` experts,
  :math:`\epsilon` of 0.1-0.5 against activations of unit variance (a norm that ignores
  it is off by 5-20 %), RoPE base 7 (frequencies :math:`7^{-2i/d_h}` against
  :math:`10000^{-2i/d_h}`, Baggag & Saad §3.6.2), temperatures 0.5 and 3, tied
  embeddings, no final norm, bidirectional attention, biases on and off,
  :math:`d_h \ne d/h`; Mamba's selective state-space block, alone and in a hybrid with
  attention (Gu & Dao 2023); RWKV-4's block, alone and in a hybrid (Peng et al. 2023);
  Mamba-2's, alone and in a hybrid (Dao & Gu 2024);
  Gemma 2's soft caps; GPT-NeoX's parallel block; partial rotary in the half pairing
  (Pythia, Phi) and GPT-J's block (interleaved partial rotary, a biased unembedding);
  Gemma 2's sandwich norms, query scalar and alternating local/global layers; Granite's
  multipliers; OLMo 2's output-only norms and joint QK-norm; FAVOR+ and Linformer
  attention (Baggag & Saad §4.4; the other attention variants are verified node by node in
  ``tests/test_attention_models.py``);
* :func:`verify_zoo`: :func:`~nlaverify.pipeline.verify_pipeline` on each, node by node;
* :func:`field_effect` / :func:`check_field_effects`: for every field, two configurations
  differing in that field only (:data:`EFFECT_PAIRS`, in :mod:`nlaverify.zoo_pairs`) must
  give graph losses (and logits) that differ by far more than the tolerance, *and* the
  independent model must reproduce both members. A builder that ignores a field is then
  caught even where it agrees with itself, and a model that ignores it too is caught by the
  first clause.

Sizes are tiny (d = 8-12, one or two blocks, n = 6) so the whole zoo runs in CI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.zoo_members import BASE, ZOO
from nlaverify.zoo_pairs import EFFECT_PAIRS

__all__ = [
    "BASE",
    "EFFECT_FACTOR",
    "EFFECT_PAIRS",
    "ZOO",
    "FieldEffect",
    "check_field_effects",
    "config_fields",
    "default_value",
    "field_effect",
    "format_zoo_line",
    "run_zoo_command",
    "uncovered_fields",
    "verify_zoo",
    "zoo_config",
    "zoo_coverage",
]

#: an effect counts as "seen" when it exceeds the comparison bound by this factor: four
#: orders of magnitude above what rounding error may do (observed effects are 1e-3 to 1,
#: bounds ~1e-13)
EFFECT_FACTOR = 1e4


def config_fields() -> list[str]:
    """The fields of :class:`TransformerConfig` that define a model (all but ``name``)."""
    return [f.name for f in fields(TransformerConfig) if f.name != "name"]


def default_value(cfg: TransformerConfig, name: str) -> Any:
    """The value field ``name`` of ``cfg`` would take by default: the dataclass default,
    ``n_heads`` for ``n_kv_heads``, ``d_model // n_heads`` for ``d_head``, and
    :data:`BASE`'s value for the sizes (fields without a default)."""
    if name == "n_kv_heads":
        return cfg.n_heads
    if name == "d_head":
        return cfg.d_model // cfg.n_heads
    f = next(f for f in fields(TransformerConfig) if f.name == name)
    return getattr(BASE, name) if f.default is MISSING else f.default


def zoo_config(name: str) -> TransformerConfig:
    """The zoo member called ``name``."""
    for cfg in ZOO:
        if cfg.name == name:
            return cfg
    from nlaverify.errors import UnknownNameError

    raise UnknownNameError(f"unknown zoo config {name!r}: expected one of "
                           f"{', '.join(c.name for c in ZOO)}")


def zoo_coverage(zoo: Sequence[TransformerConfig] = ZOO) -> dict[str, list[str]]:
    """For every model-defining field of :class:`TransformerConfig` (``dataclasses.fields``,
    ``name`` excluded), the zoo members where it is not at its default
    (:func:`default_value`). A field with an empty list is not exercised."""
    return {name: [c.name for c in zoo if getattr(c, name) != default_value(c, name)]
            for name in config_fields()}


def uncovered_fields(zoo: Sequence[TransformerConfig] = ZOO) -> list[str]:
    """Fields that no zoo member moves from its default (must be empty)."""
    return [f for f, names in zoo_coverage(zoo).items() if not names]


def _verify_member(job: tuple[Any, tuple[str, ...], int, int, int, dict[str, Any]]) -> Any:
    """One member's pipeline report (a pool worker's unit of work)."""
    from nlaverify.pipeline import verify_pipeline

    cfg, backends, seed, n, digits, extra = job
    return verify_pipeline(cfg, backends, seed=seed, n=min(n, cfg.context), digits=digits,
                           **extra)


def verify_zoo(backends: Sequence[str] = ("numpy", "jax"),
               configs: Sequence[TransformerConfig] | None = None, *, seed: int = 0, n: int = 6,
               digits: int = 30, batch: int | None = None,
               on_report: Callable[[Any], None] | None = None, jobs: int = 1) -> list[Any]:
    """:func:`~nlaverify.pipeline.verify_pipeline` (graph node by node on each backend
    against JAX autodiff; lowered jit and independent model end to end) on every member
    of the zoo (or of ``configs``), with ``n`` capped at each member's context and, when
    ``batch`` is given, that many right-padded sequences. ``on_report`` sees each report
    as it is made, in zoo order. ``jobs > 1`` verifies the members in that many processes
    (each compiles its own members' programs: the members have different shapes, so
    nothing is compiled twice).

    Returns:
        the :class:`~nlaverify.pipeline.PipelineReport`\\ s, in zoo order.
    """
    from nlaverify.proofs import _ignore_sigint, _terminate

    extra = {} if batch is None else {"batch": batch}
    members = list(ZOO if configs is None else configs)
    work = [(cfg, tuple(backends), seed, n, digits, extra) for cfg in members]
    reports = []
    if jobs > 1 and len(work) > 1:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        pool = ProcessPoolExecutor(max_workers=min(jobs, len(work)),
                                   mp_context=get_context("spawn"), initializer=_ignore_sigint)
        try:
            for rep in pool.map(_verify_member, work):
                if on_report is not None:
                    on_report(rep)
                reports.append(rep)
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown()
        return reports
    for job in work:
        rep = _verify_member(job)
        if on_report is not None:
            on_report(rep)
        reports.append(rep)
    return reports


def run_zoo_command(backends: Sequence[str], *, seed: int = 0, n: int = 6, digits: int = 30,
                    batch: int | None = None, as_json: bool = False,
                    jobs: int | None = None) -> int:
    """``nlaverify verify --zoo``: one line per member as it finishes (or, with ``as_json``,
    one JSON document at the end), then ``zoo: N passed, N failed``; ``jobs`` processes (the
    cores by default). Returns the exit
    status: 0 when every member passes, else 1. An unknown backend raises
    :class:`~nlaverify.errors.UnknownNameError` before anything runs."""

    from nlaverify.errors import UnknownNameError

    known = ("numpy", "jax", "mpmath", "cupy", "strict")
    unknown = [b for b in backends if b not in known]
    if unknown:
        raise UnknownNameError(f"verify: unknown backend {unknown[0]!r}: expected some of "
                               f"{', '.join(sorted(known))}")
    import os

    jobs = jobs or os.cpu_count() or 1
    reports = verify_zoo(backends, seed=seed, n=n, digits=digits, batch=batch, jobs=jobs,
                         on_report=None if as_json else
                         lambda r: print(format_zoo_line(r), flush=True))
    passed = sum(r.ok for r in reports)
    if as_json:
        from nlaverify import jsonout

        jsonout.dump({"ok": passed == len(reports), "passed": passed,
                      "failed": len(reports) - passed,
                      "reports": [r.as_dict() for r in reports]})
    else:
        print(f"zoo: {passed} passed, {len(reports) - passed} failed")
    return 0 if passed == len(reports) else 1


def format_zoo_line(report: Any) -> str:
    """One line per zoo member: ok/FAIL, worst error/bound, and where it failed."""
    ratios = [c.worst() for c in report.comparisons] + [e / b for _, _, e, b in
                                                       report.end_to_end]
    checks = len(report.comparisons) + len(report.end_to_end)
    line = (f"zoo {report.config.name:<26} {'ok' if report.ok else 'FAIL':<4} "
            f"worst error/bound {max(ratios, default=0.0):.2e} over {checks} checks")
    if report.ok:
        return line
    why = [f"graph on {c.subject}: first divergent value {c.first_value_divergence}, faulty "
           f"VJP at {c.faulty_vjp}" for c in report.comparisons if not c.ok]
    why += [f"{s} {q}" for s, q, e, b in report.end_to_end if e > b]
    why += [f"graph on {b}: {r}" for b, r in report.errors]
    if report.model_divergence:
        why.append(f"independent JAX model: first divergence at {report.model_divergence}")
    return line + " (" + "; ".join(why) + ")"


@dataclass(frozen=True)
class FieldEffect:
    """The effect of one field: a zoo member ``a`` and its copy ``b`` with the field set to
    ``value_b``, on the graph (NumPy, forward) and on the independent model.

    ``effect``/``model_effect``: the normwise difference between the two members' outputs
    (loss, and logits when their shapes match), on the graph and on the model;
    ``agreement``: the worst normwise graph-versus-model error over both members;
    ``bound``: the largest tolerance of those comparisons.
    """

    field: str
    config: str
    value_a: Any
    value_b: Any
    graph_loss: tuple[float, float]
    model_loss: tuple[float, float]
    effect: float
    model_effect: float
    agreement: float
    bound: float

    @property
    def agrees(self) -> bool:
        """Graph and model agree on both members (so they differ by the same amount)."""
        return self.agreement <= self.bound

    @property
    def visible(self) -> bool:
        """The field changes the output by far more than the tolerance, on both sides."""
        return min(self.effect, self.model_effect) >= EFFECT_FACTOR * self.bound

    @property
    def ok(self) -> bool:
        return self.agrees and self.visible

    def describe(self) -> str:
        status = "ok" if self.ok else "FAIL"
        why = [] if self.agrees else [f"graph and model disagree ({self.agreement:.2e} > "
                                      f"{self.bound:.2e})"]
        if not self.visible:
            why.append(f"effect too small (graph {self.effect:.2e}, model "
                       f"{self.model_effect:.2e}; needs {EFFECT_FACTOR:g} x {self.bound:.2e})")
        return (f"{self.field:<16} {self.config:<20} {self.value_a!r} -> {self.value_b!r}: "
                f"graph loss {self.graph_loss[0]:.6f} -> {self.graph_loss[1]:.6f}, model "
                f"{self.model_loss[0]:.6f} -> {self.model_loss[1]:.6f}: {status}"
                + (f" ({'; '.join(why)})" if why else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "config": self.config, "value_a": self.value_a,
                "value_b": self.value_b, "graph_loss": list(self.graph_loss),
                "model_loss": list(self.model_loss), "effect": self.effect,
                "model_effect": self.model_effect, "agreement": self.agreement,
                "bound": self.bound, "ok": self.ok}


def _run_both(cfg: TransformerConfig, params: dict[str, np.ndarray],
              data: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], Any]:
    """Graph forward on NumPy and the independent model: ``({"loss", "logits"}, bound)``
    per side, the bound from the tolerance model as in the end-to-end check."""
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace, to_float64
    from nlaverify.graph.build import build_transformer, graph_constants
    from nlaverify.graph.compare import accumulation_length
    from nlaverify.graph.core import evaluate
    from nlaverify.graph.run import graph_inputs
    from nlaverify.models.jax_transformer import intermediates
    from nlaverify.tolerance import magnitude_condition, tolerance

    graph = build_transformer(cfg)
    xp = get_namespace("numpy")
    out = "logits_tempered" if "logits_tempered" in graph else "logits"
    data = {**graph_constants(graph), **data}  # the random features, fixed inputs
    vals = evaluate(graph, xp, graph_inputs(graph, xp, params, data, "float64"),
                    outputs=["loss", out])
    jp = {k: jnp.asarray(v) for k, v in params.items()}
    rec = intermediates(jp, data["tokens"], cfg, data["targets"])
    graph_out = {"loss": to_float64(vals["loss"]), "logits": to_float64(vals[out])}
    model_out = {"loss": to_float64(rec["loss"]), "logits": to_float64(rec[out])}
    k = accumulation_length(graph, int(np.shape(data["tokens"])[-1]))
    depth = 2 * (4 * cfg.n_blocks + 6)  # the end-to-end depth of verify_pipeline
    worst, bound = 0.0, 0.0
    for q in ("loss", "logits"):
        tol = tolerance("float64", size=k, depth=depth,
                        condition=magnitude_condition(graph_out[q], power=1))
        c = tol.compare(model_out[q], graph_out[q])
        worst, bound = max(worst, c.normwise), max(bound, tol.rtol)
    return {"graph": graph_out, "model": model_out, "agreement": worst}, bound


def _difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Normwise difference of two members' outputs: the loss, and the logits when the
    shapes match (the same vocabulary and sequence length)."""
    d = abs(float(b["loss"]) - float(a["loss"])) / max(1.0, abs(float(a["loss"])))
    if a["logits"].shape == b["logits"].shape:
        scale = max(1.0, float(np.max(np.abs(a["logits"]))))
        d = max(d, float(np.max(np.abs(b["logits"] - a["logits"]))) / scale)
    return d


def field_effect(name: str, config: TransformerConfig | str, value: Any, *, seed: int = 0,
                 n: int = 6, cache: dict[Any, Any] | None = None) -> FieldEffect:
    r"""The effect of changing field ``name`` of ``config`` to ``value``, everything else
    equal: the same seeded parameters wherever the two graphs have a parameter of the
    same name and shape, the same seeded tokens (the first
    :math:`\min(n, \text{context})`).

    Both members run on the graph (NumPy forward) and on the independent model. The
    effect is *seen* (:attr:`FieldEffect.ok`) when graph and model agree on both members
    within the tolerance model's end-to-end bound, and the two members differ by at
    least :data:`EFFECT_FACTOR` times that bound, on both sides. ``cache`` (a dict)
    keeps the runs of ``config`` for further calls with the same ``seed`` and ``n``.
    """
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params, sample_data

    cfg_a = zoo_config(config) if isinstance(config, str) else config
    cfg_b = cfg_a.replace(**{name: value})
    params_a = init_params(build_transformer(cfg_a), seed)
    params_b = init_params(build_transformer(cfg_b), seed)
    for p, v in params_a.items():  # share every parameter the two graphs have in common
        if p in params_b and params_b[p].shape == v.shape:
            params_b[p] = v
    runs = []
    bound = 0.0
    for cfg, params in ((cfg_a, params_a), (cfg_b, params_b)):
        key = (cfg, cfg.name, seed, n)
        if cache is None or cfg is cfg_b or key not in cache:
            data = sample_data(cfg.vocab_size, min(n, cfg.context), seed)
            result = _run_both(cfg, params, data)
            if cache is not None and cfg is cfg_a:
                cache[key] = result
        else:
            result = cache[key]
        runs.append(result[0])
        bound = max(bound, result[1])
    ga, gb = runs[0]["graph"], runs[1]["graph"]
    ma, mb = runs[0]["model"], runs[1]["model"]
    return FieldEffect(
        field=name, config=cfg_a.name, value_a=getattr(cfg_a, name), value_b=value,
        graph_loss=(float(ga["loss"]), float(gb["loss"])),
        model_loss=(float(ma["loss"]), float(mb["loss"])),
        effect=_difference(ga, gb), model_effect=_difference(ma, mb),
        agreement=max(runs[0]["agreement"], runs[1]["agreement"]), bound=bound)


def check_field_effects(names: Sequence[str] | None = None, *, seed: int = 0,
                        n: int = 6) -> list[FieldEffect]:
    """:func:`field_effect` for every pair of :data:`EFFECT_PAIRS` (or of the fields
    ``names``). A field of :class:`TransformerConfig` with no pair raises ``KeyError``."""
    out = []
    cache: dict[Any, Any] = {}
    for name in config_fields() if names is None else names:
        for member, value in EFFECT_PAIRS[name]:
            out.append(field_effect(name, member, value, seed=seed, n=n, cache=cache))
    return out
