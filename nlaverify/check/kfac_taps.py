r"""A user's JAX model with named linear layers, ready for K-FAC: the ``tap`` that records
each layer's input :math:`a` and output :math:`s` and perturbs :math:`s` for the output
cotangents :math:`g`, the layer table (leaves, flat offsets), and :class:`ModelKfac` (factors,
exact and tapped blocks, the tolerance). The math, the public calls (:func:`model_kfac`,
``kfac_report``, ``check_kfac``) and the seed section are in :mod:`nlaverify.check.kfac`,
which imports this module (never the reverse).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlaverify.check.curvature import ModelCurvature, _jaxpr_depth, _split_batch, model_curvature
from nlaverify.check.report import CheckError
from nlaverify.curvature.kfac import MODES, Mode, exact_layer_block, kfac_factors
from nlaverify.tolerance import Tolerance, magnitude_condition, tolerance

#: largest dense K-FAC block (float64 entries) that a report or a product row forms
MAX_BLOCK_ENTRIES = 2**24


class Tap:
    r"""The ``tap`` a user's ``model_fn(params, inputs, tap)`` calls at a linear layer:
    ``s = tap(name, a, s)`` records the input ``a`` and output ``s`` of :math:`s = aW + b`
    and adds the zero perturbation of ``name`` (when one is set) to ``s``."""

    def __init__(self, perturbations: Mapping[str, Any] | None = None) -> None:
        self.perturbations = perturbations or {}
        self.inputs: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}

    def __call__(self, name: str, a: Any, s: Any) -> Any:
        if not isinstance(name, str):
            raise CheckError(f"model_fn: tap(name, a, s): expected a string name, got "
                             f"{type(name).__name__}")
        if name in self.inputs:
            raise CheckError(f"model_fn: layer {name!r} tapped twice: a weight used at two "
                             "places has one curvature block summing both uses, which "
                             "per-layer K-FAC does not describe; give each use its own name")
        self.inputs[name], self.outputs[name] = a, s
        if name in self.perturbations:
            s = s + self.perturbations[name]
        return s


def plain_model(model_fn: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``model_fn(params, inputs, tap)`` as the ``model_fn(params, inputs)`` of
    :func:`~nlaverify.check.curvature.model_curvature` (a tap that only records)."""
    return lambda params, inputs: model_fn(params, inputs, Tap())


@dataclass(frozen=True)
class UserLayer:
    """A named linear layer: its parameter leaves, flat offsets and dimensions."""

    name: str
    weight: str
    bias: str | None
    indices: np.ndarray  # flat indices of vec_r(W) then b, the block's order
    d_in: int
    d_out: int


@dataclass(frozen=True)
class _Seeds:
    """The few fields of a :class:`~nlaverify.curvature.graph.CurvatureProblem` that the
    seed functions of :mod:`nlaverify.curvature.kfac_graph` read, for a user's logits."""

    xp: Any
    likelihood: Any
    z: Any
    weights: Any
    backend: str = "numpy"
    logits: str = "z"

    @property
    def values(self) -> dict[str, Any]:
        return {"z": self.z}

    def require_likelihood(self, what: str) -> Any:
        return self.likelihood


def _leaf_table(jax: Any, tree: Any) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Every leaf by its dotted path and its keystr: ``(flat offset, shape)`` in
    ``ravel_pytree``'s order."""
    table: dict[str, tuple[int, tuple[int, ...]]] = {}
    offset = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape = tuple(int(s) for s in np.shape(leaf))
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
        for name in (".".join(parts), jax.tree_util.keystr(path)):
            table[name] = (offset, shape)
        offset += math.prod(shape)
    return table


def _layer_spec(name: str, spec: Any) -> tuple[str, str | None]:
    if isinstance(spec, str):
        return spec, None
    if isinstance(spec, tuple) and len(spec) in (1, 2) and isinstance(spec[0], str) and \
            (len(spec) == 1 or spec[1] is None or isinstance(spec[1], str)):
        return spec[0], spec[1] if len(spec) == 2 else None
    raise CheckError(f"argument 'layers': layer {name!r}: expected a weight leaf name or a "
                     f"pair (weight, bias), got {spec!r}")


@dataclass
class ModelKfac:
    r"""A user's model with named linear layers, ready for K-FAC (:func:`model_kfac`).

    ``curvature`` is the :class:`~nlaverify.check.curvature.ModelCurvature` of the same
    model (its GGN is the oracle); ``A`` the layer inputs as ``(N, R, d_in)``; ``mask`` the
    ``(N, R)`` positions with a target (``None``: all).
    """

    model_fn: Callable[[Any, Any, Any], Any]
    inputs: Any
    curvature: ModelCurvature
    layers: dict[str, UserLayer]
    A: dict[str, Any]
    out_shapes: dict[str, tuple[int, ...]]
    mask: Any
    positions: int
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    # -- cotangents ---------------------------------------------------------------------

    def cotangents(self, seeds: Any) -> dict[str, Any]:
        """The output cotangents of every layer for each logit seed, ``(S, N, R, d_out)``."""
        jax, jnp = _jax()
        if "pull" not in self.cache:
            mc, names = self.curvature, list(self.layers)
            zeros = {n: jnp.zeros(self.out_shapes[n], mc.flat.dtype) for n in names}

            def f(delta: Any) -> Any:
                return self.model_fn(mc.unravel(mc.flat), self.inputs, Tap(delta))

            _, pull = jax.vjp(f, zeros)
            self.cache["pull"] = jax.jit(jax.vmap(lambda u: pull(u)[0]))
        out = self.cache["pull"](jnp.asarray(seeds, self.curvature.flat.dtype))
        return {n: np.asarray(out[n], np.float64).reshape(seeds.shape[0],
                                                          *self.A[n].shape[:2], -1)
                for n in self.layers}

    def seeds(self, samples: int | None = None, seed: int = 0) -> Any:
        """Exact seeds (``samples=None``) or ``samples`` draws from the model
        (:mod:`nlaverify.check.kfac`), shape ``(S, *z.shape)``."""
        from nlaverify.curvature.kfac_graph import output_seeds

        return output_seeds(self._seed_source(), samples=samples, seed=seed)

    def _seed_source(self) -> _Seeds:
        jax, _ = _jax()
        from nlaverify.backends import get_namespace

        # host NumPy in float64: a few small ops, no compile per op (NumPy's default_rng)
        mc = self.curvature
        return _Seeds(get_namespace("numpy"), mc.likelihood,
                      np.asarray(jax.jit(mc.outputs)(mc.flat), np.float64),
                      np.asarray(mc.weights, np.float64))

    def empirical_seeds(self) -> Any:
        r"""The empirical Fisher's one seed :math:`\sqrt{w_i}\nabla_z\ell(z_i, y_i)` at the
        observed targets, shape ``(1, *z.shape)``."""
        src = self._seed_source()
        g = src.likelihood.grad(src.xp, src.z, np.asarray(self.curvature.targets))
        return (g * src.xp.sqrt(src.weights)[..., None])[None]

    # -- factors and blocks -------------------------------------------------------------

    def factors_from(self, cots: Mapping[str, Any], mode: Mode = "expand"
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{layer: (A_f, G_f)}`` (float64, host) from cotangents of :meth:`cotangents`."""
        from nlaverify.backends import get_namespace

        _check_mode(mode)
        xp = get_namespace("numpy")
        out = {}
        for n, layer in self.layers.items():
            A_f, G_f = kfac_factors(xp, self.A[n], cots[n], mode=mode,
                                    bias=layer.bias is not None, mask=self.mask)
            out[n] = (np.asarray(A_f, np.float64), np.asarray(G_f, np.float64))
        return out

    def factors(self, mode: Mode = "expand", samples: int | None = None, seed: int = 0
                ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        r"""K-FAC's :math:`(A_f, G_f)` of every layer: exact seeds or ``samples`` draws."""
        key = ("factors", mode, samples, seed if samples is not None else None)
        if key not in self.cache:
            self.cache[key] = self.factors_from(self.cotangents(self.seeds(samples, seed)),
                                                mode)
        return self.cache[key]

    def exact_block(self, name: str) -> np.ndarray:
        r"""The exact GGN block :math:`G_{WW}` of layer ``name`` from ``model_curvature``'s
        products with the unit vectors of its parameters (the route through ``params``)."""
        jax, jnp = _jax()
        layer = self._layer(name)
        if "blocks" not in self.cache:  # one vmapped pass over every layer's unit vectors
            mc = self.curvature
            idx = np.concatenate([lay.indices for lay in self.layers.values()])
            E = jnp.eye(mc.size, dtype=mc.flat.dtype)[idx]
            cols = np.asarray(jax.jit(jax.vmap(mc.operator("ggn")))(E), np.float64)  # G e_j
            self.cache["blocks"] = {n: (cols[np.isin(idx, lay.indices)][:, lay.indices]).T
                                    for n, lay in self.layers.items()}
        return self.cache["blocks"][layer.name]

    def tapped_block(self, name: str) -> np.ndarray:
        """The same block from the taps' inputs and exact seeds' cotangents
        (:func:`~nlaverify.curvature.kfac.exact_layer_block`)."""
        from nlaverify.backends import get_namespace

        layer = self._layer(name)
        if "exact_cots" not in self.cache:
            self.cache["exact_cots"] = self.cotangents(self.seeds())
        return np.asarray(exact_layer_block(get_namespace("numpy"), self.A[name],
                                            self.cache["exact_cots"][name],
                                            bias=layer.bias is not None), np.float64)

    def verify_taps(self) -> dict[str, float]:
        """Raise :class:`CheckError` naming the layer whose taps do not reproduce its exact
        block (:meth:`tapped_block` against :meth:`exact_block`); the errors otherwise."""
        tol = self.bound("float64")
        errs = {}
        for name, layer in self.layers.items():
            E, T = self.exact_block(name), self.tapped_block(name)
            err = float(np.max(np.abs(T - E))) / max(1.0, float(np.max(np.abs(E))))
            if not err <= tol.rtol:
                raise CheckError(
                    f"argument 'model_fn': layer {name!r}: the tapped input a and the "
                    f"cotangents of the tapped output give a curvature block of "
                    f"{layer.weight} that differs from the GGN's by {err:.3g} (bound "
                    f"{tol.rtol:.3g}): is a the input of the product with {layer.weight}, s "
                    "its output, and is the weight used anywhere else?")
            errs[name] = err
        return errs

    def kfac_errors(self, modes: tuple[Mode, ...] = MODES, samples: int | None = None,
                    seed: int = 0) -> list[dict[str, Any]]:
        r""":math:`\lVert A_f\otimes G_f - G_{WW}\rVert_F/\lVert G_{WW}\rVert_F` per layer
        and mode (the graph report's table)."""
        rows = []
        for name, layer in self.layers.items():
            E = self.exact_block(name)
            _dense_ok(name, E.shape[0])
            norm = max(float(np.linalg.norm(E)), np.finfo(float).tiny)
            for mode in modes:
                A_f, G_f = self.factors(mode, samples, seed)[name]
                rows.append({"layer": name, "weight": layer.weight, "size": int(E.shape[0]),
                             "mode": mode, "relative_error":
                             float(np.linalg.norm(np.kron(A_f, G_f) - E)) / norm})
        return rows

    def bound(self, dtype: str) -> Tolerance:
        r"""The tolerance of a K-FAC factor (or block) computed in ``dtype``: :math:`k =
        \max(P, |z|, \text{positions} \times S)`, :math:`D = 2d + 3` (forward, seeds' VJP,
        the factor's product), :math:`\kappa` the magnitude condition of the parameters,
        outputs and layer inputs (as :func:`~nlaverify.check.curvature.curvature_bound`);
        bfloat16/float16 with float32 accumulation and random composition."""
        jax, _ = _jax()
        if ("bound", dtype) in self.cache:
            return self.cache[("bound", dtype)]
        mc = self.curvature
        d = _jaxpr_depth(jax.make_jaxpr(mc.loss)(mc.flat).jaxpr)
        z = jax.jit(mc.outputs)(mc.flat)
        S = int(z.size)  # the exact seeds: one per position and class
        k = max(mc.size, int(z.size), self.positions * S)
        kappa = magnitude_condition(mc.flat, z, *self.A.values(), power=1)
        # below float32 the stages' independent roundings add in quadrature (Higham & Mary
        # 2019, as nlaverify.precision does); the linear rule is vacuous for bfloat16 at D ~ 50
        low = dtype in ("bfloat16", "float16")
        tol = tolerance(dtype, size=k, depth=2 * d + 3, condition=kappa,
                        accumulation="float32" if low else None,
                        composition="random" if low else "linear")
        self.cache[("bound", dtype)] = tol
        return tol

    def _layer(self, name: str) -> UserLayer:
        if name not in self.layers:
            raise CheckError(f"argument 'name': expected one of the layers "
                             f"{', '.join(map(repr, self.layers))}, got {name!r}")
        return self.layers[name]


def _jax() -> tuple[Any, Any]:
    from nlaverify.check.curvature import _jax as j

    return j()


def _check_mode(mode: Any) -> None:
    if mode not in MODES:
        raise CheckError(f"argument 'mode': expected one of {', '.join(MODES)}, got {mode!r}")


def _dense_ok(name: str, size: int) -> None:
    if size * size > MAX_BLOCK_ENTRIES:
        raise CheckError(f"layer {name!r}: its dense block ({size} x {size}) exceeds "
                         f"{MAX_BLOCK_ENTRIES} entries; the exact comparison is for small layers")


def model_kfac(
    model_fn: Callable[[Any, Any, Any], Any], params: Any, batch: Any,
    layers: Mapping[str, Any], *, likelihood: Any = "categorical", reduction: str = "mean",
) -> ModelKfac:
    r"""K-FAC for a user's JAX model (:mod:`nlaverify.check.kfac`).

    Args:
        model_fn: ``model_fn(params, inputs, tap) -> z`` of shape ``(*, C)``, calling
            ``s = tap(name, a, s)`` at each linear layer :math:`s = aW (+ b)` to cover.
        params: the parameter pytree (cast to float64).
        batch: ``{"inputs", "targets"[, "mask"]}`` or ``(inputs, targets[, mask])``.
        layers: ``{name: weight}`` or ``{name: (weight, bias)}``, leaves by dotted path or
            keystr, ``W`` of shape ``(d_in, d_out)``, ``b`` of shape ``(d_out,)``.
        likelihood: ``"categorical"``, ``"gaussian"``, ``"bernoulli"`` or a
            :class:`~nlaverify.curvature.likelihoods.Likelihood` (K-FAC needs one).
        reduction: ``"mean"``, ``"sum"``, ``"sequence_mean"``, ``"batch_mean"``.
    """
    jax, _ = _jax()
    from nlaverify.curvature.likelihoods import Likelihood

    if not callable(model_fn):
        raise CheckError(f"argument 'model_fn': expected a callable model_fn(params, inputs, "
                         f"tap), got {type(model_fn).__name__}")
    if not isinstance(layers, Mapping) or not layers:
        raise CheckError(f"argument 'layers': expected a non-empty mapping {{name: weight or "
                         f"(weight, bias)}}, got {layers!r}")
    lik = Likelihood(likelihood) if isinstance(likelihood, str) else likelihood
    if not isinstance(lik, Likelihood):
        raise CheckError(f"argument 'likelihood': K-FAC needs a likelihood ('categorical', "
                         f"'gaussian', 'bernoulli' or a Likelihood) for the square root of "
                         f"its Hessian, got {type(likelihood).__name__}")
    try:
        mc = model_curvature(None, params, batch, model_fn=plain_model(model_fn),
                             likelihood=lik, reduction=reduction)
    except CheckError as exc:
        if "positional argument" in str(exc):
            raise CheckError(f"argument 'model_fn': expected model_fn(params, inputs, tap): "
                             f"{exc}") from exc
        raise
    inputs, _, _ = _split_batch(batch)
    def traced(theta: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        tap = Tap()
        z = model_fn(mc.unravel(theta), inputs, tap)
        return z, tap.inputs, tap.outputs

    z, taps_in, taps_out = jax.jit(traced)(mc.flat)
    flat = np.asarray(mc.flat, np.float64)
    table = _leaf_table(jax, mc.unravel(mc.flat))

    def leaf_value(name: str) -> np.ndarray:
        offset, shape = table[name]
        return flat[offset:offset + math.prod(shape)].reshape(shape)

    out: dict[str, UserLayer] = {}
    A: dict[str, Any] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    mask = None
    w = np.asarray(mc.weights)
    for name, spec in layers.items():
        wname, bname = _layer_spec(name, spec)
        if name not in taps_in:
            raise CheckError(f"argument 'layers': layer {name!r} is never tapped by model_fn "
                             f"(tapped: {', '.join(map(repr, taps_in)) or 'none'}); call "
                             f"s = tap({name!r}, a, s) at its product")
        for what, leaf in (("weight", wname), ("bias", bname)):
            if leaf is not None and leaf not in table:
                names = sorted(n for n in table if not n.startswith("["))
                raise CheckError(f"argument 'layers': layer {name!r}: {what} {leaf!r} is not "
                                 f"a leaf of params (leaves: {', '.join(names)})")
        (w_off, w_shape) = table[wname]
        a = np.asarray(taps_in[name], np.float64)
        s = np.asarray(taps_out[name], np.float64)
        if len(w_shape) != 2:
            raise CheckError(f"argument 'layers': layer {name!r}: weight {wname!r}: expected "
                             f"shape (d_in, d_out), got {w_shape}")
        d_in, d_out = w_shape
        if a.ndim < 2 or a.shape[-1] != d_in or s.shape != (*a.shape[:-1], d_out):
            raise CheckError(f"model_fn: tap({name!r}, a, s): expected a of shape (*, {d_in}) "
                             f"and s of shape (*, {d_out}) with the same leading axes (weight "
                             f"{wname!r} is {w_shape}), got a {tuple(a.shape)} and s "
                             f"{tuple(s.shape)}")
        idx = [np.arange(w_off, w_off + d_in * d_out)]
        lin = a @ leaf_value(wname)
        if bname is not None:
            b_off, b_shape = table[bname]
            if b_shape != (d_out,):
                raise CheckError(f"argument 'layers': layer {name!r}: bias {bname!r}: "
                                 f"expected shape ({d_out},), got {b_shape}")
            idx.append(np.arange(b_off, b_off + d_out))
            lin = lin + leaf_value(bname)
        tol = tolerance("float64", size=d_in, depth=2,
                        condition=magnitude_condition(a, leaf_value(wname), power=1))
        err = float(np.max(np.abs(lin - s))) / max(1.0, float(np.max(np.abs(s))))
        if not err <= tol.rtol:
            what = "a W + b" if bname is not None else "a W"
            raise CheckError(f"model_fn: tap({name!r}, a, s): s is not {what} for the weight "
                             f"{wname!r}" + (f" and bias {bname!r}" if bname else "")
                             + f" (error {err:.3g}, bound {tol.rtol:.3g}): tap the product's "
                             "input and output")
        lead = a.shape[:-1]
        N, R = (lead[0], 1) if len(lead) == 1 else (math.prod(lead[:-1]), lead[-1])
        A[name] = a.reshape(N, R, d_in)
        shapes[name] = tuple(s.shape)
        if np.any(w == 0):
            if lead != z.shape[:-1]:
                raise CheckError(f"argument 'batch': mask: layer {name!r} has positions "
                                 f"{tuple(lead)}, the outputs {tuple(z.shape[:-1])}: a mask "
                                 "needs layer inputs at the outputs' positions")
            mask = (w != 0).reshape(N, R).astype(np.float64)
        used = {lay.weight: lay.name for lay in out.values()} | \
            {lay.bias: lay.name for lay in out.values() if lay.bias}
        for leaf in (wname, bname):
            if leaf is not None and table[leaf][0] in {table[u][0] for u in used}:
                other = next(v for u, v in used.items() if table[u][0] == table[leaf][0])
                raise CheckError(f"argument 'layers': layers {other!r} and {name!r} share "
                                 f"the leaf {leaf!r}: a shared weight's block sums both uses")
        out[name] = UserLayer(name, wname, bname, np.concatenate(idx), d_in, d_out)
    positions = max(int(np.prod(A[n].shape[:2])) for n in A)
    return ModelKfac(model_fn, inputs, mc, out, A, shapes, mask, positions)
