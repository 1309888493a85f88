"""Forward mode: every op's hand-derived JVP, and the graph's forward mode built on them.

Per op (generic over :data:`~nlaverify.ops.registry.OPS`): the JVP exists and is in the
catalogue; on hypothesis-drawn cases it equals ``jax.jvp`` of the forward on NumPy and
on JAX, ``None`` tangents are zeros, and it is the transpose of the VJP
(:math:`\\langle J v, g\\rangle = \\langle v, J^\\top g\\rangle`); and once with a leading
batch axis. Per graph (:data:`nlaverify.zoo.ZOO` and the MLP of Baggag & Saad §2.1):
:func:`nlaverify.graph.core.jvp` with every parameter seeded equals ``jax.jvp`` of the
graph's forward at the loss and the logits, on NumPy, JAX and mpmath, batched too. A
wrong JVP is caught by that check and by :func:`~nlaverify.symbolic.vjp_proof.prove_jvp`.
Every bound comes from :mod:`nlaverify.tolerance`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlaverify.backends import get_namespace
from nlaverify.backends.host import to_float64
from nlaverify.crosscheck import (
    case_condition,
    case_size,
    case_tangents,
    case_tolerances,
    default_case,
    run_jvp,
    run_vjp,
)
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.graph import core
from nlaverify.graph.build import build_mlp, build_transformer
from nlaverify.graph.compare import accumulation_length
from nlaverify.graph.run import graph_inputs, init_params, sample_data
from nlaverify.identities.core import load_catalogue
from nlaverify.ops import moe, sdpa
from nlaverify.ops.registry import OPS, OpSpec, fixed_routing_mask
from nlaverify.strategies import OpCase, make_case, op_cases, seeds
from nlaverify.symbolic.vjp_proof import prove_jvp
from nlaverify.tolerance import Tolerance, magnitude_condition, tolerance
from nlaverify.zoo import ZOO

DIFFERENTIABLE = [k for k, s in OPS.items() if s.differentiable]
#: mpmath digits of the graph checks (the reference is float64: more buys nothing)
DIGITS = 30
#: sequence length of the graph checks (mpmath is slow: tiny)
N = 3


def _assert_close(actual: Any, expected: Any, tol: Tolerance, what: str,
                  floor: float = 1.0) -> None:
    a, e = to_float64(actual), to_float64(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape}, expected {e.shape}"
    c = tol.compare(a, e, floor=floor)
    assert c.ok, f"{what}: error {c.normwise:.3e} > {tol.rtol:.3e} ({tol.reason})"


# -- per op -------------------------------------------------------------------------------


def test_every_differentiable_op_has_a_jvp_and_its_identity() -> None:
    catalogue = load_catalogue()
    missing = [op for op in DIFFERENTIABLE if OPS[op].jvp is None]
    assert not missing, f"ops without a JVP: {missing}"
    for op in DIFFERENTIABLE:
        jvp = OPS[op].jvp
        identity = catalogue[f"{op}_jvp"]
        assert identity.certifies[1] == f"{jvp.__module__}.{jvp.__qualname__}"
        assert identity.certifies[0] == OPS[op].qualified_names[0]


def _duality(case: OpCase, T: Sequence[np.ndarray]) -> None:
    r""":math:`\langle \dot f, G\rangle = \sum_a \langle \dot a, \bar a\rangle` in float64.

    Both sides are inner products of results that each meet the normwise bound of the
    cross-check, so their errors are at most :math:`\mathrm{rtol}\sum_o |G_o|
    \max(1, \max|\dot f|)` (and alike on the right); that sum is the comparison's scale,
    and the inner product is one more stage (depth 3)."""
    dot = to_float64(run_jvp(case, "numpy", T))
    _, cot = run_vjp(case, "numpy")
    cot = [to_float64(c) for c in cot]
    G = case.cotangent
    lhs = float(np.sum(dot * G))
    rhs = float(sum(np.sum(t * c) for t, c in zip(T, cot, strict=True)))
    scale = max(float(np.sum(np.abs(G))) * max(1.0, float(np.max(np.abs(dot), initial=0))),
                sum(float(np.sum(np.abs(t))) * max(1.0, float(np.max(np.abs(c), initial=0)))
                    for t, c in zip(T, cot, strict=True)))
    tol = tolerance("float64", size=case_size(case), condition=case_condition(case), depth=3)
    _assert_close(lhs, rhs, tol, "<JVP(v), g> vs sum_a <v_a, VJP(g)_a>", floor=scale)


def _jax_jvps(case: OpCase, T: Sequence[np.ndarray]) -> tuple[Any, Any]:
    """``(jax.jvp of the forward, the hand-derived JVP on the JAX namespace)`` along ``T``,
    in one ``jax.jit`` (one compilation instead of one per primitive and shape: eager JAX
    compiles every primitive for every new shape, which dominated this file's time)."""
    import jax

    xp = get_namespace("jax")
    base = [xp.asarray(x) if a.kind == "tokens" else xp.asarray(x, dtype=xp.float64)
            for a, x in zip(case.spec.args, case.args, strict=True)]
    real = case.real_indices()

    def both(reals: list[Any], tangents: list[Any]) -> tuple[Any, Any]:
        full = list(base)
        for k, r in zip(real, reals, strict=True):
            full[k] = r
        return (case.spec.autodiff_jvp(full, tangents, **case.static),
                case.spec.jvp(xp, tuple(tangents), *full, **case.static))

    return jax.jit(both)([base[k] for k in real], [xp.asarray(t) for t in T])


def _check_against_jax(case: OpCase, T: Sequence[np.ndarray], what: str = "") -> None:
    tol, _ = case_tolerances(case)
    reference, on_jax = _jax_jvps(case, T)
    _assert_close(on_jax, reference, tol, f"{what}jax JVP vs jax.jvp")
    _assert_close(run_jvp(case, "numpy", T), reference, tol, f"{what}numpy JVP vs jax.jvp")


@pytest.mark.parametrize("op", DIFFERENTIABLE)
@settings(max_examples=max(1, settings().max_examples // 2))  # 3 in ci: see _jax_jvps
@given(data=st.data())
def test_jvp_is_jax_jvp_with_none_as_zero_and_transposes_the_vjp(op: str, data) -> None:
    case = data.draw(op_cases(op))
    seed = data.draw(seeds)
    T = case_tangents(case, seed)
    _check_against_jax(case, T)
    # a random nonempty subset of the tangents kept, the others None (the graph's zeros)
    rng = np.random.default_rng(seed)
    keep = rng.random(len(T)) < 0.5
    keep[rng.integers(len(T))] = True
    sparse = [t if k else None for t, k in zip(T, keep, strict=True)]
    zeros = [t if k else np.zeros_like(t) for t, k in zip(T, keep, strict=True)]
    _assert_close(run_jvp(case, "numpy", sparse), run_jvp(case, "numpy", zeros),
                  case_tolerances(case)[0], f"JVP with tangents {keep.tolist()} kept: None "
                                            "vs zeros")
    _duality(case, T)


def _batched_case(spec: OpSpec, B: int = 2) -> OpCase:
    """The op on ``B`` sequences of its proof sizes: per-token arguments (those with an
    ``n`` dimension, tokens, masks, fixed arrays) get a leading batch axis, one seeded
    draw per sequence; parameters are shared (as in :mod:`nlaverify.identities.batching`)."""
    sizes = dict(spec.proof_sizes)
    cases = [make_case(spec, sizes, seed=11 + b) for b in range(B)]
    args: list[Any] = []
    for k, a in enumerate(spec.args):
        if a.kind == "mask":
            args.append(np.stack([np.roll(fixed_routing_mask(*np.shape(cases[0].args[k])), b,
                                          axis=-1) for b in range(B)]))
        elif a.kind != "real" or a.per_sequence:
            args.append(np.stack([c.args[k] for c in cases]))
        else:
            args.append(cases[0].args[k])
    out = spec.forward(get_namespace("numpy"), *args, **spec.static)
    G = np.random.default_rng(5).standard_normal(np.shape(out))
    return OpCase(spec, sizes, args, dict(spec.static), G)


@pytest.mark.parametrize("op", DIFFERENTIABLE)
def test_batched_jvp_is_jax_jvp(op: str) -> None:
    case = _batched_case(OPS[op])
    _check_against_jax(case, case_tangents(case, seed=3), "batched ")


# -- the graph's forward mode ------------------------------------------------------------


def _split(graph: nx.DiGraph, inputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    params = {k: v for k, v in inputs.items() if graph.nodes[k]["kind"] == "param"}
    return params, {k: v for k, v in inputs.items() if k not in params}


def _jax_jvp_reference(graph: nx.DiGraph, params: dict[str, np.ndarray],
                       data: dict[str, np.ndarray], tangents: dict[str, np.ndarray],
                       outputs: Sequence[str]) -> list[Any]:
    """The independent oracle: ``jax.jvp`` of the graph's forward (no hand JVP involved)."""
    import jax

    xp = get_namespace("jax")
    p, rest = _split(graph, graph_inputs(graph, xp, params, data))

    def forward(p: dict[str, Any]) -> tuple[Any, ...]:
        values = core.evaluate(graph, xp, {**rest, **p}, outputs=outputs)
        return tuple(values[o] for o in outputs)

    t = {k: xp.asarray(v) for k, v in tangents.items()}
    return list(jax.jvp(forward, (p,), (t,))[1])


def _graph_jvp(graph: nx.DiGraph, backend: str, params: dict[str, np.ndarray],
               data: dict[str, np.ndarray], tangents: dict[str, np.ndarray],
               outputs: Sequence[str]) -> list[Any]:
    """The subject: :func:`nlaverify.graph.core.jvp` on ``backend`` (the ops' JVPs)."""
    xp = get_namespace(backend, digits=DIGITS if backend == "mpmath" else None)
    inputs = graph_inputs(graph, xp, params, data)
    values = core.evaluate(graph, xp, inputs, outputs=outputs)
    tan = core.jvp(graph, xp, values, {k: xp.asarray(v) for k, v in tangents.items()},
                   outputs=outputs)
    return [tan[o] for o in outputs]


@dataclass(frozen=True)
class GraphCase:
    """A graph, its seeded parameters, data and parameter tangents, and the ``jax.jvp``
    reference tangents of ``outputs``."""

    graph: nx.DiGraph
    params: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    tangents: dict[str, np.ndarray]
    outputs: tuple[str, ...]
    reference: list[Any]
    n: int = N


def _graph_case(graph: nx.DiGraph, params: dict[str, np.ndarray], data: dict[str, np.ndarray],
                outputs: Sequence[str]) -> GraphCase:
    """Every parameter seeded with a standard normal tangent, and the reference."""
    rng = np.random.default_rng(17)
    tangents = {k: rng.standard_normal(np.shape(v)) for k, v in params.items()}
    return GraphCase(graph, params, data, tangents, tuple(outputs),
                     _jax_jvp_reference(graph, params, data, tangents, outputs))


def _graph_failures(case: GraphCase,
                    backends: Sequence[str] = ("numpy", "jax", "mpmath")) -> list[str]:
    """The output tangents of each backend against ``jax.jvp``. Bound: float64 over the
    graph's longest chain of stages (value and tangent: twice its length), its longest
    accumulation, and the reference's scale."""
    k = accumulation_length(case.graph, case.n)
    depth = 2 * (nx.dag_longest_path_length(case.graph) + 1)
    failures = []
    for backend in backends:
        got = _graph_jvp(case.graph, backend, case.params, case.data, case.tangents,
                         case.outputs)
        for o, a, e in zip(case.outputs, got, case.reference, strict=True):
            tol = tolerance("float64", size=k, depth=depth,
                            condition=magnitude_condition(e, power=1))
            a, e = to_float64(a), to_float64(e)
            c = tol.compare(a, e) if a.shape == e.shape else None
            if c is None or not c.ok:
                failures.append(f"{backend} {o}: " + (f"shape {a.shape} vs {e.shape}" if c is
                                                      None else f"error {c.normwise:.2e} > "
                                                                f"{tol.rtol:.2e}"))
    return failures


@functools.cache
def _transformer_case(name: str, batch: int | None) -> GraphCase:
    """A zoo member on ``N`` tokens (``batch`` right-padded sequences), with its reference
    computed once per session: it does not depend on the JVPs under test (the mutation
    test below reuses it)."""
    config = next(c for c in ZOO if c.name == name)
    graph = build_transformer(config)
    data = sample_data(config.vocab_size, N, seed=2, batch=batch, pad=config.causal)
    return _graph_case(graph, init_params(graph, seed=1), data, ["loss", "logits"])


#: zoo members also checked on one unbatched sequence (eager JAX compiles every primitive
#: for every new shape, so each one costs seconds; these two share their shapes with the
#: mutation test): post-LN LayerNorm with two blocks, and routed ReLU experts
ONE_SEQUENCE = ("post-layernorm", "moe-relu-top2")


#: zoo members also run on the (eager, compile-per-primitive, so slow) JAX namespace when
#: batched; the others run the same op code on NumPy and mpmath (and every op's JVP is
#: checked on JAX one by one above)
ON_JAX = ("gqa-rope-swiglu", "moe-gelu-top1-tied")


@pytest.mark.parametrize(("name", "batch"), [(c.name, 2) for c in ZOO]
                         + [(name, None) for name in ONE_SEQUENCE])
def test_transformer_forward_mode_is_jax_jvp(name: str, batch: int | None) -> None:
    backends = ("numpy", "jax", "mpmath") if batch is None or name in ON_JAX else \
        ("numpy", "mpmath")
    failures = _graph_failures(_transformer_case(name, batch), backends)
    assert not failures, "\n".join(failures)


def test_mlp_forward_mode_is_jax_jvp() -> None:
    graph = build_mlp([3, 4, 2])
    rng = np.random.default_rng(4)
    data = {"x": rng.standard_normal((N, 3)), "y": rng.standard_normal((N, 2))}
    failures = _graph_failures(_graph_case(graph, init_params(graph, seed=0), data,
                                           ["loss", "layer2"]))
    assert not failures, "\n".join(failures)


# -- a wrong JVP is caught ----------------------------------------------------------------


def _attention_no_rowsum(xp, T, Q, K, V, causal=False, scale=None):
    """Planted error: :math:`\\dot P = P \\odot \\dot S` (the row-sum term dropped)."""
    dQ, dK, dV = T
    P = sdpa.softmax(xp, sdpa.attention_scores(xp, Q, K, causal))
    dS = (xp.matmul(dQ, xp.matrix_transpose(K)) + xp.matmul(Q, xp.matrix_transpose(dK))) \
        / xp.const_sqrt(Q.shape[-1])
    return xp.matmul(P * dS, V) + xp.matmul(P, dV)


_moe_jvp = moe.moe_jvp


def _moe_no_gate_tangent(xp, T, X, scores, mask, *weights, activation="gelu"):
    """Planted error: the router scores' tangent dropped (gates treated as constant)."""
    return _moe_jvp(xp, (T[0], None, *T[2:]), X, scores, mask, *weights,
                    activation=activation)


MUTANTS: dict[str, tuple[Any, str, Callable[..., Any], str]] = {
    "attention": (sdpa, "attention_jvp", _attention_no_rowsum, "post-layernorm"),
    "moe": (moe, "moe_jvp", _moe_no_gate_tangent, "moe-relu-top2"),
}


@pytest.mark.parametrize("op", list(MUTANTS))
def test_a_wrong_jvp_is_caught_by_the_graph_check_and_the_proof(op: str, monkeypatch) -> None:
    module, attr, mutant, config = MUTANTS[op]
    assert prove_jvp(OPS[op]).verdict == "proved"  # the control: the real JVP passes
    assert not _graph_failures(_transformer_case(config, None), backends=("numpy",))
    monkeypatch.setattr(module, attr, mutant)
    assert OPS[op].jvp is mutant
    assert prove_jvp(OPS[op]).verdict == "failed"
    failures = _graph_failures(_transformer_case(config, None), backends=("numpy",))
    assert len(failures) == 2, failures


# -- bad input ------------------------------------------------------------------------------


def test_op_jvps_name_the_bad_tangent() -> None:
    xp = get_namespace("numpy")
    att, mha, mo = (default_case(OPS[op], seed=0) for op in ("attention",
                                                             "multihead_attention", "moe"))
    Q, K, V = att.args
    with pytest.raises(ShapeError, match=r"attention_jvp: argument 'dK': expected shape "
                                         r"\(\*, n_k=4, d_k=4\), got \(4, 3\)"):
        sdpa.attention_jvp(xp, (None, np.ones((4, 3)), None), Q, K, V)
    with pytest.raises(ArgumentError, match=r"expected a tuple of 3 tangents \(dQ, dK, dV\), "
                                            r"got 2"):
        sdpa.attention_jvp(xp, (Q, K), Q, K, V)
    with pytest.raises(ShapeError, match=r"multihead_attention_jvp: argument 'dW_O'"):
        sdpa.multihead_attention_jvp(xp, (None, None, None, None, np.ones((2, 2))), *mha.args,
                                     **mha.static)
    with pytest.raises(ShapeError, match=r"moe_jvp: argument 'dscores'"):
        moe.moe_jvp(xp, (None, np.ones((1, 1)), None, None), *mo.args, **mo.static)
    with pytest.raises(ArgumentError, match=r"moe_jvp: argument 'T': expected a tuple of 4"):
        moe.moe_jvp(xp, (None, None, None), *mo.args, **mo.static)



def test_graph_jvp_names_the_bad_tangent_node() -> None:
    graph = build_mlp([2, 3, 1])
    xp = get_namespace("numpy")
    params = init_params(graph, seed=0)
    data = {"x": np.ones((2, 2)), "y": np.ones((2, 1))}
    values = core.evaluate(graph, xp, graph_inputs(graph, xp, params, data))
    with pytest.raises(UnknownNameError, match=r"unknown tangent node 'layer9\.W'"):
        core.jvp(graph, xp, values, {"layer9.W": np.ones((2, 3))})
    with pytest.raises(ShapeError, match=r"node 'layer1\.W': expected shape \(2, 3\), got "
                                         r"\(3, 2\)"):
        core.jvp(graph, xp, values, {"layer1.W": np.ones((3, 2))})
    partial = core.evaluate(graph, xp, graph_inputs(graph, xp, params, data),
                            outputs=["layer1"])
    with pytest.raises(UnknownNameError, match=r"'layer2\.W' has no value"):
        core.jvp(graph, xp, partial, {"layer2.W": np.ones((3, 1))})


@pytest.mark.parametrize("op", [k for k, s in OPS.items() if s.differentiable])
def test_op_jvps_reject_a_wrong_number_of_tangents_or_no_tangent(op: str) -> None:
    spec = OPS[op]
    case = make_case(spec, dict(spec.proof_sizes), seed=0)
    xp = get_namespace("numpy")
    args = [xp.asarray(a) if not isinstance(a, np.ndarray) else a for a in case.args]
    real = [args[k] for k in case.real_indices()]
    with pytest.raises(ArgumentError, match="argument 'T'"):
        spec.jvp(xp, (*real, real[0]), *args, **case.static)
    with pytest.raises(ArgumentError, match="not None"):
        spec.jvp(xp, tuple(None for _ in real), *args, **case.static)


def test_loss_jvps_reject_broadcastable_tangents() -> None:
    from nlaverify.ops import loss

    xp = get_namespace("numpy")
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((4, 4))
    with pytest.raises(ShapeError, match="'dZ': expected shape \\(4, 4\\)"):
        loss.cross_entropy_jvp(xp, (rng.standard_normal(4),), Z, np.arange(4))
    with pytest.raises(ShapeError, match="'dYhat': expected shape \\(4, 4\\)"):
        loss.half_squared_error_jvp(xp, (rng.standard_normal((4, 4, 1)),), Z, Z)


def test_graph_jvp_refuses_a_tangent_on_token_ids() -> None:
    from nlaverify.config import preset
    from nlaverify.errors import DTypeError

    cfg = preset("tiny")
    g = build_transformer(cfg)
    xp = get_namespace("numpy")
    inputs = graph_inputs(g, xp, init_params(g, 0), sample_data(cfg.vocab_size, 3, 0))
    values = core.evaluate(g, xp, inputs)
    with pytest.raises(DTypeError, match="node 'tokens' holds integers"):
        core.jvp(g, xp, values, {"tokens": np.ones(3)})
