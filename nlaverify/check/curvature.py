r"""Curvature of a **user's** JAX model: GGN, Fisher, empirical Fisher and Hessian products
of a loss written over a parameter pytree, dense matrices for small models, top eigenvalues,
the damped natural gradient, and a check of the user's own curvature product.

The model is given as ``model_fn(params, inputs) -> z`` (logits, a mean, log-odds; shape
``(*, C)``) plus a likelihood (Baggag & Saad §5.1–5.2), the split that the GGN and the Fisher
need; or as ``loss_fn(params, batch) -> scalar`` alone, which has a Hessian only. The
parameters are flattened by ``jax.flatten_util.ravel_pytree`` into :math:`\theta \in
\mathbb R^P`, and with :math:`L(\theta) = \sum_i w_i\,\ell(z_i(\theta), y_i)` (weights of the
:class:`~nlaverify.curvature.likelihoods.Reduction`), :math:`J_i = \partial z_i/\partial
\theta`:

.. math::
    G v &= \sum_i w_i J_i^\top H(z_i) J_i v, &
    F v &= \sum_i w_i J_i^\top S_i S_i^\top J_i v\quad (S_iS_i^\top = H(z_i)),\\
    \hat F v &= \sum_i w_i J_i^\top g_i\, g_i^\top J_i v\quad (g_i = \nabla_z\ell(z_i, y_i)),
    & \nabla^2 L\,v &= \tfrac{d}{dt}\nabla L(\theta + t v)\big|_{t=0},

the Monte-Carlo Fisher averaging :math:`g_{si}` at targets :math:`y_{si} \sim p(\cdot\mid
z_i)` drawn from ``seed``. Each product is one ``jax.jvp``, a map in output space by the
likelihood functions that the curvature proofs certify (:meth:`Likelihood.hvp`,
:meth:`Likelihood.hessian_sqrt`, :meth:`Likelihood.grad`, :meth:`Likelihood.sample`), and one
``jax.vjp``: the generalisation of :class:`~nlaverify.curvature.graph.CurvatureProblem` from
an nlaverify graph to any pytree. The exact Fisher goes through the square-root factors, a
route other than the GGN's :math:`Hu`, so that GGN = Fisher is a check, not a copy. A
likelihood given as a callable ``loss_of_z(z, targets) -> scalar`` has a GGN (its
:math:`H_L` by forward-over-reverse in :math:`z`) but no Fisher.

Eigenvalues come from :func:`nlaverify.curvature.solvers.top_eigenvalues` (matfree Lanczos,
each Ritz value with its certified residual), the natural gradient from
:func:`~nlaverify.curvature.solvers.damped_solve` (lineax CG, true residual).

:func:`check_curvature` runs a user's product (e.g. their GGN-vector product) on seeded
probe directions against these, each judged by the tolerance model of the user's dtype
with :math:`k = \max(P, |z|)`, :math:`D = 2d + 2` for a loss at depth :math:`d` (the longest
chain of the loss's jaxpr; the forward, JVP, VJP, output map and assembly, as
:func:`~nlaverify.curvature.operators.curvature_tolerance`) and :math:`\kappa` the magnitude
condition of the outputs and the parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from nlaverify.check.adapters import require_framework
from nlaverify.check.report import CheckError, CheckReport, compare_arrays, error_row
from nlaverify.tolerance import Tolerance, magnitude_condition, tolerance

__all__ = ["KINDS", "ModelCurvature", "check_curvature", "model_curvature"]

Kind = Literal["ggn", "fisher", "empirical_fisher", "hessian"]
KINDS: tuple[Kind, ...] = ("ggn", "fisher", "empirical_fisher", "hessian")


def _jax() -> tuple[Any, Any]:
    jax = require_framework("jax", argument="params")  # enables float64
    import jax.numpy as jnp

    return jax, jnp


def _split_batch(batch: Any) -> tuple[Any, Any, Any]:
    """``(inputs, targets, mask)`` of a batch given as a mapping (keys ``inputs``,
    ``targets``, optional ``mask``) or a tuple ``(inputs, targets[, mask])``."""
    if isinstance(batch, Mapping):
        missing = [k for k in ("inputs", "targets") if k not in batch]
        if missing:
            raise CheckError(f"argument 'batch': expected keys 'inputs' and 'targets' (and "
                             f"optionally 'mask'), missing {missing[0]!r}")
        return batch["inputs"], batch["targets"], batch.get("mask")
    if isinstance(batch, tuple) and len(batch) in (2, 3):
        return batch[0], batch[1], batch[2] if len(batch) == 3 else None
    raise CheckError(f"argument 'batch': expected a mapping with 'inputs' and 'targets' or a "
                     f"tuple (inputs, targets[, mask]), got {type(batch).__name__}")


def _jaxpr_depth(jaxpr: Any) -> int:
    """The longest chain of dependent equations of a jaxpr (sub-jaxprs of calls and
    ``jit`` counted by their own depth)."""
    depth: dict[Any, int] = {}

    def get(v: Any) -> int:
        return depth.get(v, 0) if hasattr(v, "aval") and not hasattr(v, "val") else 0

    longest = 0
    for eqn in jaxpr.eqns:
        inner = 1
        for p in eqn.params.values():
            sub = getattr(p, "jaxpr", None)
            if sub is not None and hasattr(sub, "eqns"):
                inner = max(inner, _jaxpr_depth(sub))
            elif hasattr(p, "eqns"):
                inner = max(inner, _jaxpr_depth(p))
        d = max([0, *(get(v) for v in eqn.invars)]) + inner
        for v in eqn.outvars:
            depth[v] = d
        longest = max(longest, d)
    return longest


@dataclass
class ModelCurvature:
    r"""A user's model at a point, ready for curvature products (:func:`model_curvature`).

    ``size`` is :math:`P`; ``unravel`` maps a flat vector back to the parameter pytree.
    Products accept and return the same form: a pytree shaped like ``params`` or a flat
    ``(P,)`` vector.
    """

    kind: Kind
    flat: Any
    unravel: Callable[[Any], Any]
    loss: Callable[[Any], Any]
    outputs: Callable[[Any], Any] | None
    likelihood: Any
    weights: Any
    targets: Any
    samples: int | None
    seed: int
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return int(self.flat.shape[0])

    # -- flat operators -----------------------------------------------------------------

    def _need_likelihood(self, kind: str) -> Any:
        from nlaverify.curvature.likelihoods import Likelihood

        if self.outputs is None:
            raise CheckError(f"kind {kind!r}: needs model_fn (the outputs z the likelihood is "
                             "placed on); a loss_fn alone has only a Hessian")
        if kind != "ggn" and not isinstance(self.likelihood, Likelihood):
            raise CheckError(f"kind {kind!r}: needs a likelihood ('categorical', 'gaussian', "
                             f"'bernoulli' or a Likelihood), got a loss callable: a loss "
                             "without a likelihood has no Fisher")
        return self.likelihood

    def operator(self, kind: Kind | None = None) -> Callable[[Any], Any]:
        r"""The jitted flat map :math:`v \mapsto Cv`, ``(P,) -> (P,)``, of ``kind`` (default
        the one of :func:`model_curvature`)."""
        kind = kind or self.kind
        if kind not in KINDS:
            raise CheckError(f"argument 'kind': expected one of {', '.join(KINDS)}, got "
                             f"{kind!r}")
        if kind in self.cache:
            return self.cache[kind]
        jax, jnp = _jax()
        from nlaverify.backends import get_namespace

        xp = get_namespace("jax")
        if kind == "hessian":
            grad = jax.grad(self.loss)
            fn = jax.jit(lambda v: jax.jvp(grad, (self.flat,), (v,))[1])
            self.cache[kind] = fn
            return fn
        lik = self._need_likelihood(kind)
        zfn, theta, w = self.outputs, self.flat, self.weights
        assert zfn is not None
        z, pullback = jax.vjp(zfn, theta)
        wz = w[..., None]
        if kind == "ggn" and callable(lik) and not hasattr(lik, "hvp"):
            ell = lambda zz: lik(zz, self.targets)  # noqa: E731
            gz = jax.grad(ell)

            def space(u: Any) -> Any:
                return jax.jvp(gz, (z,), (u,))[1]
        elif kind == "ggn":
            def space(u: Any) -> Any:
                return wz * lik.hvp(xp, z, u)
        elif kind == "fisher" and self.samples is None:
            S = lik.hessian_sqrt(xp, z)                        # (*, C, C), S S^T = H

            def space(u: Any) -> Any:
                return wz * jnp.sum(S * jnp.sum(S * u[..., :, None], axis=-2)[..., None, :],
                                    axis=-1)
        else:
            if kind == "fisher":
                key = jax.random.key(self.seed)
                shape = (self.samples, *z.shape)
                noise = (jax.random.normal(key, shape, z.dtype) if lik.noise_kind() == "normal"
                         else jax.random.uniform(key, shape, z.dtype,
                                                 minval=jnp.finfo(z.dtype).tiny))
                zs = jnp.broadcast_to(z, shape)
                g = lik.grad(xp, zs, lik.sample(xp, zs, noise))  # (S, *, C)
            else:
                g = lik.grad(xp, z, self.targets)[None]

            def space(u: Any) -> Any:
                return wz * jnp.mean(g * jnp.sum(g * u, axis=-1, keepdims=True), axis=0)

        def apply(v: Any) -> Any:
            return pullback(space(jax.jvp(zfn, (theta,), (v,))[1]))[0]

        fn = jax.jit(apply)
        self.cache[kind] = fn
        return fn

    def _flat(self, v: Any, what: str = "v") -> tuple[Any, bool]:
        jax, jnp = _jax()
        if isinstance(v, jax.Array | np.ndarray) and np.ndim(v) == 1:
            if v.shape != (self.size,):
                raise CheckError(f"argument {what!r}: expected a flat vector of shape "
                                 f"({self.size},) or a pytree like params, got shape "
                                 f"{tuple(v.shape)}")
            return jnp.asarray(v, self.flat.dtype), False
        from jax.flatten_util import ravel_pytree

        try:
            flat, _ = ravel_pytree(v)
            same = jax.tree.structure(v) == jax.tree.structure(self.unravel(self.flat))
        except Exception as exc:
            raise CheckError(f"argument {what!r}: expected a pytree like params or a flat "
                             f"vector: {type(exc).__name__}: {exc}") from exc
        if not same or flat.shape != (self.size,):
            raise CheckError(f"argument {what!r}: expected a pytree with the structure and "
                             f"shapes of params ({self.size} entries), got "
                             f"{jax.tree.structure(v)} with {flat.shape[0]} entries")
        return flat.astype(self.flat.dtype), True

    def matvec(self, v: Any, kind: Kind | None = None) -> Any:
        """The product of ``kind``'s matrix with ``v`` (pytree or flat, returned alike)."""
        flat, tree = self._flat(v)
        out = self.operator(kind)(flat)
        return self.unravel(out) if tree else out

    def dense(self, kind: Kind | None = None) -> np.ndarray:
        """The ``(P, P)`` matrix (float64, host) from the products with :math:`e_1, \\dots,
        e_P` (vmapped): for small models."""
        jax, jnp = _jax()
        op = self.operator(kind)
        key = ("dense", kind or self.kind)
        if key not in self.cache:
            self.cache[key] = jax.jit(jax.vmap(op))
        return np.asarray(self.cache[key](jnp.eye(self.size, dtype=self.flat.dtype)))

    def gradient(self) -> Any:
        r""":math:`\nabla_\theta L` as a pytree."""
        jax, _ = _jax()
        return self.unravel(jax.grad(self.loss)(self.flat))

    def top_eigenvalues(self, k: int = 3, kind: Kind | None = None, **kw: Any) -> Any:
        """The ``k`` largest eigenvalues (Lanczos, :func:`~nlaverify.curvature.solvers.
        top_eigenvalues`; each with its residual bound)."""
        from nlaverify.curvature.solvers import top_eigenvalues

        return top_eigenvalues(self.operator(kind), self.size, k, seed=self.seed, **kw)

    def natural_gradient(self, damping: float, kind: Kind = "fisher",
                         rtol: float | None = None) -> tuple[Any, Any]:
        r"""The damped natural gradient :math:`(C + \lambda I)^{-1}\nabla L` (Baggag & Saad
        §5.1) by CG: ``(pytree, Solve)``, the :class:`~nlaverify.curvature.solvers.Solve`
        holding the true residual."""
        from nlaverify.curvature.solvers import damped_solve

        jax, _ = _jax()
        sol = damped_solve(self.operator(kind), jax.grad(self.loss)(self.flat), damping,
                           rtol=rtol)
        return self.unravel(sol.x), sol

    def summary(self, top: int = 3, kinds: tuple[Kind, ...] | None = None) -> str:
        """The curvature report's text form for this model: per kind (default every kind
        the model has) the top eigenvalues (Lanczos) with their certified residuals."""
        if kinds is None:
            kinds = tuple(k for k in KINDS if self.outputs is not None or k == "hessian")
            if self.outputs is not None and not hasattr(self.likelihood, "hvp"):
                kinds = ("hessian", "ggn")
        k = min(top, self.size)
        lines = [f"curvature of the user's model ({self.size} parameters): top {k} "
                 "eigenvalues by Lanczos (+- certified residual)"]
        for kind in kinds:
            pairs = self.top_eigenvalues(k, kind)  # type: ignore[arg-type]
            vals = ", ".join(f"{v:.6g} (+-{r:.1e})" for v, r in zip(
                pairs.values, pairs.residuals, strict=True))
            lines.append(f"  {kind:<17} {vals}")
        return "\n".join(lines)


def model_curvature(
    loss_fn: Callable[[Any, Any], Any] | None, params: Any, batch: Any, *,
    kind: Kind = "ggn", model_fn: Callable[[Any, Any], Any] | None = None,
    likelihood: Any = "categorical", reduction: str = "mean", samples: int | None = None,
    seed: int = 0,
) -> ModelCurvature:
    r"""The curvature of a user's JAX model at ``params`` on ``batch`` (module docstring).

    Args:
        loss_fn: ``loss_fn(params, batch) -> scalar``; ``None`` to derive it from
            ``model_fn`` and ``likelihood``. When both are given they must agree (checked).
        params: the parameter pytree (cast to float64).
        batch: with ``model_fn``: ``{"inputs", "targets"[, "mask"]}`` or ``(inputs,
            targets[, mask])``; else whatever ``loss_fn`` takes.
        kind: the default of :meth:`ModelCurvature.matvec` and friends: ``"ggn"``,
            ``"fisher"``, ``"empirical_fisher"``, ``"hessian"``.
        model_fn: ``model_fn(params, inputs) -> z`` of shape ``(*, C)``.
        likelihood: ``"categorical"`` (integer targets), ``"gaussian"``, ``"bernoulli"``, a
            :class:`~nlaverify.curvature.likelihoods.Likelihood`, or a callable
            ``loss_of_z(z, targets) -> scalar`` (GGN and Hessian only).
        reduction: ``"mean"``, ``"sum"``, ``"sequence_mean"``, ``"batch_mean"``
            (:class:`~nlaverify.curvature.likelihoods.Reduction`; ignored for a callable).
        samples, seed: the Monte-Carlo Fisher's draws (kind ``"fisher"``; ``None``: exact).
    """
    jax, jnp = _jax()
    from jax.flatten_util import ravel_pytree

    from nlaverify.backends import get_namespace
    from nlaverify.curvature.likelihoods import Likelihood, Reduction

    if kind not in KINDS:
        raise CheckError(f"argument 'kind': expected one of {', '.join(KINDS)}, got {kind!r}")
    if loss_fn is None and model_fn is None:
        raise CheckError("arguments 'loss_fn', 'model_fn': expected at least one (a loss_fn "
                         "for the Hessian, a model_fn and a likelihood for GGN/Fisher)")
    for name, f in (("loss_fn", loss_fn), ("model_fn", model_fn)):
        if f is not None and not callable(f):
            raise CheckError(f"argument {name!r}: expected a callable, got {type(f).__name__}")
    if samples is not None and (not isinstance(samples, int) or isinstance(samples, bool)
                                or samples < 1):
        raise CheckError(f"argument 'samples': expected an integer >= 1, got {samples!r}")
    try:
        params64 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
        flat, unravel = ravel_pytree(params64)
    except Exception as exc:
        raise CheckError(f"argument 'params': expected a pytree of real arrays: "
                         f"{type(exc).__name__}: {exc}") from exc
    if flat.size == 0:
        raise CheckError("argument 'params': the pytree holds no parameters")
    user_loss = None if loss_fn is None else (lambda t: loss_fn(unravel(t), batch))
    outputs = lik = weights = targets = None
    if model_fn is not None:
        inputs, targets, mask = _split_batch(batch)
        outputs = lambda t: model_fn(unravel(t), inputs)  # noqa: E731
        try:
            z = jax.jit(outputs)(flat)
        except Exception as exc:
            raise CheckError(f"argument 'model_fn': raised {type(exc).__name__}: {exc}") \
                from exc
        if getattr(z, "ndim", 0) < 1:
            raise CheckError(f"output of model_fn: expected an array of shape (*, C), got "
                             f"{type(z).__name__} of shape {getattr(z, 'shape', ())}")
        lik = Likelihood(likelihood) if isinstance(likelihood, str) else likelihood
        if not isinstance(lik, Likelihood) and not callable(lik):
            raise CheckError(f"argument 'likelihood': expected a family name, a Likelihood "
                             f"or a callable loss_of_z(z, targets), got {type(lik).__name__}")
        xp = get_namespace("jax")
        m = jnp.ones(z.shape[:-1], z.dtype) if mask is None else jnp.asarray(mask, z.dtype)
        if m.shape != z.shape[:-1]:
            raise CheckError(f"argument 'batch': mask: expected shape {z.shape[:-1]}, got "
                             f"{m.shape}")
        if isinstance(lik, Likelihood):
            if lik.family == "categorical":
                targets = jnp.asarray(targets)
                if targets.shape != z.shape[:-1]:
                    raise CheckError(f"argument 'batch': targets: expected integer classes "
                                     f"of shape {z.shape[:-1]}, got {targets.shape}")
                targets = jnp.where(m > 0, targets, 0)
            else:
                targets = jnp.asarray(targets, z.dtype)
            weights = Reduction(reduction).weights(xp, m)  # type: ignore[arg-type]

            def model_loss(t: Any) -> Any:
                return jnp.sum(weights * lik.nll(xp, outputs(t), targets))
        else:
            weights = jnp.ones(z.shape[:-1], z.dtype)

            def model_loss(t: Any) -> Any:
                return lik(outputs(t), targets)
        if user_loss is not None:
            a, b = float(jax.jit(user_loss)(flat)), float(jax.jit(model_loss)(flat))
            tol = tolerance("float64", size=int(z.size), depth=4,
                            condition=magnitude_condition(z, power=1))
            if not abs(a - b) <= tol.rtol * max(1.0, abs(b)):
                raise CheckError(f"arguments 'loss_fn' and 'model_fn'/'likelihood' disagree: "
                                 f"loss_fn gives {a!r}, the {reduction} {lik} of model_fn's "
                                 f"outputs gives {b!r} (bound {tol.rtol:.2g}); check the "
                                 "reduction and the likelihood")
        loss = user_loss or model_loss
    else:
        loss = user_loss
        if kind != "hessian":
            raise CheckError(f"kind {kind!r}: needs model_fn (and a likelihood); a loss_fn "
                             "alone has only a Hessian")
    try:
        value = jax.jit(loss)(flat)
    except Exception as exc:
        raise CheckError(f"argument 'loss_fn': raised {type(exc).__name__}: {exc}") from exc
    if getattr(value, "shape", None) != ():
        raise CheckError(f"output of loss_fn: expected a scalar, got shape "
                         f"{getattr(value, 'shape', type(value).__name__)}")
    return ModelCurvature(kind, flat, unravel, loss, outputs, lik, weights, targets, samples,
                          seed)


def curvature_bound(mc: ModelCurvature, dtype: str) -> Tolerance:
    r"""The tolerance of a product of ``mc`` computed in ``dtype`` (module docstring):
    :math:`k = \max(P, |z|)`, :math:`D = 2d + 2`, :math:`\kappa` the magnitude condition."""
    jax, _ = _jax()
    d = _jaxpr_depth(jax.make_jaxpr(mc.loss)(mc.flat).jaxpr)
    z = jax.jit(mc.outputs)(mc.flat) if mc.outputs is not None else None
    k = max(mc.size, int(z.size) if z is not None else 1)
    kappa = magnitude_condition(mc.flat, *(() if z is None else (z,)), power=1)
    if dtype in ("bfloat16", "float16"):
        # tens of stages: the linear rule is vacuous (C D u > 1); independent roundings add
        # in quadrature, with float32 sums (Higham & Mary 2019; as nlaverify.precision does)
        return tolerance(dtype, size=k, depth=2 * d + 2, condition=kappa,
                         accumulation="float32", composition="random")
    return tolerance(dtype, size=k, depth=2 * d + 2, condition=kappa)


def check_curvature(
    user_product: Callable[[Any, Any, Any], Any], loss_fn: Callable[[Any, Any], Any] | None,
    params: Any, batch: Any, *, kind: Kind = "ggn", model_fn: Callable[[Any, Any], Any] | None
    = None, likelihood: Any = "categorical", reduction: str = "mean", dtype: str = "float64",
    probes: int = 3, seed: int = 0, samples: int | None = None,
) -> CheckReport:
    r"""Check a user's curvature product ``user_product(params, batch, v) -> Cv`` (``v`` and
    the result pytrees like ``params``, or flat vectors) against :func:`model_curvature`'s
    product of ``kind`` on ``probes`` seeded standard-normal directions.

    ``params`` and ``v`` are rounded to ``dtype`` for the user; the reference runs in
    float64 on the rounded values. Each row names the product, the probe, the parameter
    leaf (its pytree path) and the entry where the error is worst, judged by
    :func:`curvature_bound`.
    """
    jax, jnp = _jax()
    from nlaverify.check.adapters import framework_dtype

    if not callable(user_product):
        raise CheckError(f"argument 'user_product': expected a callable, got "
                         f"{type(user_product).__name__}")
    if not isinstance(probes, int) or isinstance(probes, bool) or probes < 1:
        raise CheckError(f"argument 'probes': expected an integer >= 1, got {probes!r}")
    if samples is not None:
        raise CheckError("argument 'samples': a Monte-Carlo product is random: check it "
                         "with check_function(..., 'mc_fisher') (variance-derived bounds), "
                         "or check your exact product here (samples=None)")
    jdt = framework_dtype("jax", dtype)
    rounded = jax.tree.map(lambda a: jnp.asarray(a).astype(jdt).astype(jnp.float64), params)
    mc = model_curvature(loss_fn, rounded, batch, kind=kind, model_fn=model_fn,
                         likelihood=likelihood, reduction=reduction, samples=samples,
                         seed=seed)
    tol = curvature_bound(mc, dtype)
    leaves = jax.tree_util.tree_flatten_with_path(mc.unravel(mc.flat))[0]
    names = [jax.tree_util.keystr(p) or "params" for p, _ in leaves]
    sizes = [int(np.prod(np.shape(leaf))) for _, leaf in leaves]
    shapes = [tuple(np.shape(leaf)) for _, leaf in leaves]
    user_params = jax.tree.map(lambda a: a.astype(jdt), mc.unravel(mc.flat))
    report = CheckReport(getattr(user_product, "__name__", "user_product"), "check_curvature",
                         notes=[f"reference: the {kind} product of model_curvature "
                                f"({mc.size} parameters), {probes} probes from seed {seed}"])
    key = jax.random.key(seed)
    hinted: list[str] = []
    for k in range(probes):
        v = jax.random.normal(jax.random.fold_in(key, k), (mc.size,), jnp.float64)
        v = v.astype(jdt).astype(jnp.float64)
        expected = np.asarray(mc.operator(kind)(v))
        check = f"{kind} product, probe {k}"
        try:
            out = user_product(user_params, batch, jax.tree.map(lambda a: a.astype(jdt),
                                                                mc.unravel(v)))
        except Exception as exc:
            report.rows.append(error_row(report.subject, check, exc, where="user_product"))
            continue
        actual, _ = mc._flat(jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), out)
                             if not hasattr(out, "ndim") else jnp.asarray(out, jnp.float64),
                             what="output of user_product")
        row = compare_arrays(report.subject, check, np.asarray(actual), expected, tol,
                             label="Cv")
        report.rows.append(replace(row, where=_leaf_where(row.where, names, sizes, shapes)))
        if not row.ok and not hinted:
            from nlaverify.check.curvature_hints import curvature_hints

            hinted = curvature_hints(mc, kind, v, np.asarray(actual), expected, tol, KINDS)
            report.notes.extend(hinted)
    return report


def _leaf_where(where: str, names: list[str], sizes: list[int],
                shapes: list[tuple[int, ...]]) -> str:
    """``Cv[123]`` (flat) as the parameter leaf and its entry, e.g. ``['W1'][2, 3]``."""
    if not where.startswith("Cv["):
        return where
    flat = int(where[3:-1])
    for name, n, shape in zip(names, sizes, shapes, strict=True):
        if flat < n:
            idx = np.unravel_index(flat, shape) if shape else ()
            return f"{name}[{', '.join(str(int(i)) for i in idx)}]" if shape else name
        flat -= n
    return where
