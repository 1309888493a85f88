r"""Dense curvature matrices, flat jitted operators and the Hessian product of a graph model
(Baggag & Saad §5.1–5.2; the products themselves are in :mod:`nlaverify.curvature.graph`).

* :func:`linear_operator`: :math:`v \mapsto C v` on flat vectors, one ``jax.jit`` per kind
  and problem (cached on it), the forward values passed in, so a call is one JVP, one
  logit-space map and one VJP (the Hessian: one forward-over-reverse pass);
* :func:`hessian_vp` (from :mod:`nlaverify.curvature.hessian`): on JAX, forward-over-reverse,
  ``jax.jvp`` of the gradient that the graph's *hand* VJPs compute; on mpmath,
  Richardson-extrapolated central differences of that same hand gradient
  (:func:`hessian_fd_tolerance` bounds their error); NumPy has no second-order mode and raises;
* :func:`dense`: the :math:`P \times P` matrix. GGN, Fisher and empirical Fisher are
  assembled from the Jacobian :math:`J` (``P`` forward-mode passes) and per-position
  factors, a route independent of the products' reverse pass: :math:`G = \sum_i w_i
  J_i^\top (H_i J_i)`; the exact Fisher :math:`F = \sum_i w_i (S_i^\top J_i)^\top (S_i^\top
  J_i)` from the factor :math:`S_i S_i^\top = H(z_i)` of :meth:`Likelihood.hessian_sqrt`;
  sampled and empirical Fisher :math:`\sum_{s,i} w_i (J_i^\top g_{s,i})(J_i^\top
  g_{s,i})^\top / S`. The Hessian is assembled from its products. Memory is
  :math:`O(P^2 + P\,|z|)`: for small models.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.backends.host import to_host
from nlaverify.curvature.graph import (
    draw_noise,
    loss_hessian_vp,
    observed_gradients,
    product,
    sampled_gradients,
)
from nlaverify.curvature.hessian import _hessian_jax, fd_step, hessian_fd_tolerance, hessian_vp
from nlaverify.curvature.problem import (
    KINDS,
    CurvatureProblem,
    Kind,
    cached_jit,
    forward_values,
    logits_tangent,
)
from nlaverify.errors import ArgumentError, ShapeError
from nlaverify.graph.core import needed_nodes
from nlaverify.tolerance import Tolerance

# the Hessian product lives in nlaverify.curvature.hessian; these names stay importable here
__all__ = [
    "MAP_CHUNK",
    "chunked_map",
    "curvature_tolerance",
    "dense",
    "fd_step",
    "hessian_fd_tolerance",
    "hessian_vp",
    "jacobian_matrix",
    "linear_operator",
]


def _check_kind(kind: str, samples: int | None) -> None:
    if kind not in KINDS:
        raise ArgumentError(f"curvature kind {kind!r}: expected one of {', '.join(KINDS)}")
    if samples is not None and kind != "fisher":
        raise ArgumentError(f"curvature kind {kind!r}: argument 'samples' is for the "
                            "Monte-Carlo Fisher only (kind 'fisher')")


def linear_operator(problem: CurvatureProblem, kind: Kind = "ggn", *,
                    samples: int | None = None, seed: int = 0) -> Callable[[Any], Any]:
    r"""The flat operator :math:`v \mapsto C v` (``(P,) -> (P,)``) of curvature ``kind``
    (``"ggn"``, ``"fisher"``, ``"empirical_fisher"``, ``"hessian"``), jitted; JAX only.

    The Monte-Carlo Fisher (``samples=S``) draws its noise once, from ``seed``: the operator
    is then a fixed matrix. A vector of the wrong shape raises :class:`ShapeError`.
    """
    _check_kind(kind, samples)
    if problem.backend != "jax":
        raise ArgumentError(f"linear_operator: the jitted operator needs the 'jax' backend, "
                            f"got {problem.backend!r} (use ggn_vp, fisher_vp, ... there)")
    if kind in ("fisher", "empirical_fisher"):
        problem.require_likelihood("Fisher" if kind == "fisher" else "empirical Fisher")
    if kind == "hessian":
        def build_h() -> Callable[..., Any]:
            return lambda inputs, vec: problem.flatten(
                _hessian_jax(problem, inputs, problem.unflatten(vec)))

        fn = cached_jit(problem, ("op", kind), build_h)
        args: tuple[Any, ...] = (problem.inputs,)
    else:
        # the exact Fisher product is the GGN one (canonical likelihoods): one compilation
        same = "ggn" if kind == "fisher" and samples is None else kind

        def build() -> Callable[..., Any]:
            return lambda values, weights, noise, vec: problem.flatten(
                product(problem, same, values, weights, problem.unflatten(vec), noise))

        fn = cached_jit(problem, ("op", same), build)
        noise = None if samples is None else draw_noise(problem, samples, seed)
        args = (forward_values(problem), problem.weights, noise)

    def apply(vec: Any) -> Any:
        got = tuple(int(s) for s in np.shape(vec))
        if got != (problem.size,):
            raise ShapeError(f"{kind} operator: expected a vector of shape ({problem.size},) "
                             f"(the {len(problem.params)} selected parameters), got {got}")
        return fn(*args, vec)

    return apply


def _eye(problem: CurvatureProblem) -> Any:
    eye = np.eye(problem.size)
    if problem.xp.object_arrays:
        return problem.xp.asarray(eye)
    return problem.xp.asarray(eye, dtype=problem.values[problem.logits].dtype)


#: rows mapped per vectorised chunk: XLA on the CPU (jax 0.10, float32) returns wrong values
#: from a jitted ``jax.vmap`` over more than 512 rows (a reduction inside the mapped function
#: goes astray past row 512; float64 is unaffected), so large maps go in chunks of this many
MAP_CHUNK = 256


def chunked_map(f: Callable[[Any], Any], xs: Any) -> Any:
    """``jax.vmap(f)(xs)`` computed ``MAP_CHUNK`` rows at a time (``jax.lax.map`` with a
    batch size): the same result, without the XLA float32 miscompilation above 512 rows."""
    import jax

    return jax.lax.map(f, xs, batch_size=MAP_CHUNK)


def jacobian_matrix(problem: CurvatureProblem) -> Any:
    r"""The Jacobian of the logits in the selected parameters, shape ``(P, *z.shape)``: row
    :math:`k` is :math:`J e_k` by forward mode (on JAX one cached ``jax.jit`` of a
    chunked ``jax.vmap``, :func:`chunked_map`; elsewhere a loop over the :math:`P`
    directions)."""
    values = forward_values(problem)

    def row(e: Any) -> Any:
        return logits_tangent(problem, values, problem.unflatten(e))

    if problem.backend == "jax":

        return cached_jit(problem, "jacobian", lambda: lambda e: chunked_map(row, e))(
            _eye(problem))
    return problem.xp.stack([row(e) for e in _eye(problem)])


def _gram(xp: Any, A: Any, B: Any, P: int) -> Any:
    r""":math:`\sum_{\text{rest}} A_{k\ldots} B_{l\ldots}`: the rows flattened, then
    :math:`A B^\top`."""
    return xp.matmul(xp.reshape(A, (P, -1)), xp.matrix_transpose(xp.reshape(B, (P, -1))))


def dense(problem: CurvatureProblem, kind: Kind = "ggn", *, samples: int | None = None,
          seed: int = 0) -> np.ndarray:
    r"""The dense ``(P, P)`` curvature matrix of ``kind`` over the selected parameters, a
    host array (object ``mpf`` on mpmath). ``samples``/``seed``: the Monte-Carlo Fisher,
    the same draws as :func:`fisher_vp` with the same arguments.

    GGN and Fisher from the Jacobian (:func:`jacobian_matrix`, one compilation shared by
    every kind) and per-position factors, assembled on the host for JAX (NumPy namespace):
    :math:`G = \sum_i w_i J_i^\top (H_i J_i)`, the exact Fisher :math:`\sum_i w_i (S_i^\top
    J_i)^\top(S_i^\top J_i)` with :math:`S_i S_i^\top = H(z_i)` (:meth:`Likelihood.
    hessian_sqrt`), sampled and empirical :math:`\sum_{s,i} w_i (J_i^\top g_{s,i})
    (J_i^\top g_{s,i})^\top / S`. The Hessian: its products with :math:`e_1, \dots, e_P`
    (on JAX through the one compiled operator)."""
    _check_kind(kind, samples)
    P = problem.size
    if kind in ("fisher", "empirical_fisher"):
        problem.require_likelihood("Fisher" if kind == "fisher" else "empirical Fisher")
    if kind == "hessian":
        cols = [hessian_vp(problem, e) for e in _eye(problem)]  # H e_k, H symmetric
        if problem.backend == "jax":
            return np.stack([np.concatenate([to_host(c[p]).reshape(-1) for p in problem.params])
                             for c in cols])
        return to_host(problem.xp.stack([problem.flatten(c) for c in cols]))
    noise = None if samples is None else draw_noise(problem, samples, seed)
    J = jacobian_matrix(problem)                          # (P, *pos, C): J e_k
    if kind == "ggn" and problem.likelihood is None:      # H_L by JAX (loss_hessian_vp)

        values = forward_values(problem)
        HJ = chunked_map(lambda t: loss_hessian_vp(problem, values, None, t), J)
        return _gram(np, to_host(J), to_host(HJ), P)
    on_host = problem.backend == "jax"
    xp = get_namespace("numpy") if on_host else problem.xp
    move = to_host if on_host else (lambda a: a)
    J, w = move(J), move(problem.weights)
    z, noise = move(problem.values[problem.logits]), None if noise is None else move(noise)
    lik = problem.likelihood
    assert lik is not None
    if kind == "ggn":
        HJ = w[..., None] * lik.hvp(xp, xp.zeros_like(J) + z, J)
        return to_host(_gram(xp, J, HJ, P))
    if kind == "fisher" and noise is None:
        S = lik.hessian_sqrt(xp, z)                       # (*pos, C, C), S S^T = H
        M = xp.sum(J[..., :, None] * S, axis=-2)          # (P, *pos, C): S_i^T J_i e_k
        return to_host(_gram(xp, w[..., None] * M, M, P))
    g = (sampled_gradients(problem, z, noise, xp) if kind == "fisher"
         else observed_gradients(problem, z, xp if on_host else None))  # (S, *pos, C)
    a = xp.sum(J[:, None] * g[None], axis=-1)             # (P, S, *pos): g^T J_i e_k
    return to_host(_gram(xp, w * a, a, P) / g.shape[0])


def curvature_tolerance(problem: CurvatureProblem, *, dtype: Any = None) -> Tolerance:
    r"""The tolerance for comparing a curvature product or matrix of ``problem`` with an
    independent reference (the tolerance model :math:`C\kappa D\sqrt k\,u`): :math:`k` the
    longest accumulation (the graph's largest dimension, the logits' size summed over by
    :math:`J^\top u`, or :math:`P`), :math:`D = 2d + 2` stages for a loss at depth :math:`d`
    (the forward and the JVP chain, the VJP chain back, the logit-space map and the
    assembly), :math:`\kappa` the magnitude condition of the logits and the selected
    parameters. ``dtype``: the less precise side (default: the problem's own)."""
    import networkx as nx

    from nlaverify.graph.compare import accumulation_length
    from nlaverify.tolerance import magnitude_condition, tolerance

    z = problem.values[problem.logits]
    shape = tuple(int(s) for s in np.shape(z))
    n = shape[-2] if len(shape) > 1 else 1
    k = max(accumulation_length(problem.graph, n), math.prod(shape), problem.size)
    sub = problem.graph.subgraph(needed_nodes(problem.graph, [problem.loss]))
    depth = 2 * (nx.dag_longest_path_length(sub) + 1) + 2
    kappa = magnitude_condition(z, *(problem.values[p] for p in problem.params), power=1)
    if dtype is None and problem.backend == "mpmath":
        return tolerance("mpmath", size=k, depth=depth, condition=kappa, digits=problem.digits)
    return tolerance(dtype or str(getattr(z, "dtype", "float64")), size=k, depth=depth,
                     condition=kappa)
