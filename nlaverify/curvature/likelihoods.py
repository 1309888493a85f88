r"""Per-position likelihoods and loss-reduction conventions, stated once.

Baggag & Saad §5.1–5.2: a loss :math:`\ell(z, y) = -\log p(y \mid z)` of the model's output
:math:`z` (logits, a mean, a log-odds) is a negative log-likelihood. Three families, each
with its natural parameter :math:`z`, so that the Hessian in :math:`z` does not depend on
:math:`y` and the GGN equals the Fisher (identity ``ggn_equals_fisher_*``):

- categorical: :math:`\ell = -\log\operatorname{softmax}(z)_y`,
  :math:`\nabla_z\ell = p - e_y`, :math:`H = \operatorname{diag}(p) - pp^\top`;
- gaussian: :math:`\ell = \lVert z - y\rVert^2/(2\sigma^2)`,
  :math:`\nabla_z\ell = (z - y)/\sigma^2`, :math:`H = I/\sigma^2`;
- bernoulli: :math:`\ell = -\sum_c y_c\log\sigma(z_c) + (1-y_c)\log\sigma(-z_c)`,
  :math:`\nabla_z\ell = \sigma(z) - y`, :math:`H = \operatorname{diag}(\sigma(z)\sigma(-z))`

(the Gaussian's additive constant :math:`\tfrac C2\log 2\pi\sigma^2` is dropped). The
squared error conventions are Gaussians: :math:`\tfrac12\lVert r\rVert^2` is
:math:`\sigma^2 = 1`, :math:`\lVert r\rVert^2` is :math:`\sigma^2 = \tfrac12` (twice the
curvature: the "factor of 2").

A batch loss is a weighted sum over positions, :math:`L = \sum_{b,i} w_{bi}\,\ell(z_{bi},
y_{bi})`, the weights set by a :class:`Reduction` (a mean over tokens, over sequences, a
sum). Every curvature matrix of :math:`L` carries the same weights:
:math:`G = \sum w_{bi} J_{bi}^\top H(z_{bi}) J_{bi}`, :math:`F = \sum w_{bi}
\mathbb E_{y\sim p(\cdot\mid z_{bi})}[J_{bi}^\top \nabla\ell\,\nabla\ell^\top J_{bi}]`, and
the empirical Fisher :math:`\sum w_{bi} J_{bi}^\top \nabla\ell(z_{bi}, y_{bi})
\nabla\ell(z_{bi}, y_{bi})^\top J_{bi}` at the observed targets.

Every function is written once against an array namespace ``xp`` (the exact SymPy one
included), so the proofs in ``nlaverify.identities.curvature`` certify these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from nlaverify.backends.base import Namespace
from nlaverify.backends.host import to_host
from nlaverify.errors import ArgumentError, ShapeError, UnknownNameError
from nlaverify.ops.activations import _sigmoid_pair
from nlaverify.ops.softmaxes import log_softmax, softmax

Family = Literal["categorical", "gaussian", "bernoulli"]
FAMILIES: tuple[Family, ...] = ("categorical", "gaussian", "bernoulli")


@dataclass(frozen=True)
class Likelihood:
    r"""A per-position negative log-likelihood :math:`\ell(z, y)` in its natural parameter.

    ``family``: ``"categorical"`` (softmax cross-entropy; ``y`` integer classes),
    ``"gaussian"`` (squared error with variance ``variance``; ``y`` real, shaped as ``z``),
    ``"bernoulli"`` (sigmoid binary cross-entropy, one independent bit per output; ``y`` in
    {0, 1}, shaped as ``z``). Arrays ``z`` are ``(*, C)``: the last axis is the output, every
    leading axis a position.
    """

    family: Family
    variance: Any = 1

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise UnknownNameError(f"Likelihood: family {self.family!r}: expected one of "
                                   f"{', '.join(FAMILIES)}")
        if self.family == "gaussian":
            try:
                ok = bool(self.variance > 0)
            except TypeError:  # a SymPy symbol declared positive compares symbolically
                ok = bool(getattr(self.variance, "is_positive", False))
            if not ok:
                raise ArgumentError(f"Likelihood: variance: expected > 0, got "
                                    f"{self.variance!r}")

    @classmethod
    def squared_error(cls, half: bool = True) -> Likelihood:
        r"""The Gaussian of :math:`\tfrac12\lVert r\rVert^2` (``half``, :math:`\sigma^2 = 1`)
        or of :math:`\lVert r\rVert^2` (:math:`\sigma^2 = \tfrac12`)."""
        from fractions import Fraction

        return cls("gaussian", 1 if half else Fraction(1, 2))

    def _var(self, xp: Namespace) -> Any:
        from fractions import Fraction

        v = self.variance
        if isinstance(v, Fraction):
            return xp.rational(v.numerator, v.denominator)
        return xp.const(v) if isinstance(v, int | float) else v

    def nll(self, xp: Namespace, z: Any, y: Any) -> Any:
        r""":math:`\ell(z, y)` per position: shape ``z.shape[:-1]``."""
        if self.family == "categorical":
            return -xp.sum(xp.one_hot(y, z.shape[-1], z.dtype) * log_softmax(xp, z), axis=-1)
        _same(self.family, z, y)
        if self.family == "gaussian":
            r = z - y
            return xp.sum(r * r, axis=-1) / (2 * self._var(xp))
        s_pos, s_neg = _sigmoid_pair(xp, z)
        return -xp.sum(y * xp.log(s_pos) + (1 - y) * xp.log(s_neg), axis=-1)

    def grad(self, xp: Namespace, z: Any, y: Any) -> Any:
        r""":math:`\nabla_z \ell(z, y)`, shape of ``z``."""
        if self.family == "categorical":
            return softmax(xp, z) - xp.one_hot(y, z.shape[-1], z.dtype)
        _same(self.family, z, y)
        if self.family == "gaussian":
            return (z - y) / self._var(xp)
        return _sigmoid_pair(xp, z)[0] - y

    def hessian(self, xp: Namespace, z: Any) -> Any:
        r""":math:`H = \nabla_z^2 \ell`, shape ``(*, C, C)``; independent of :math:`y`."""
        C = z.shape[-1]
        eye = xp.one_hot(xp.arange(C), C, z.dtype)
        d = self._diag(xp, z)
        if self.family == "categorical":
            p = d
            return eye * p[..., None] - p[..., :, None] * p[..., None, :]
        return eye * d[..., None]

    def hvp(self, xp: Namespace, z: Any, v: Any) -> Any:
        r""":math:`H v` per position without forming :math:`H`: categorical
        :math:`p \odot v - p\,\langle p, v\rangle`, else a diagonal scaling."""
        _same("hvp", z, v)
        d = self._diag(xp, z)
        if self.family == "categorical":
            return d * v - d * xp.sum(d * v, axis=-1, keepdims=True)
        return d * v

    def hessian_sqrt(self, xp: Namespace, z: Any) -> Any:
        r"""A factor :math:`S` with :math:`S S^\top = H`, shape ``(*, C, C)``: categorical
        :math:`S = \operatorname{diag}(\sqrt p) - p\sqrt p^\top` (then :math:`SS^\top =
        \operatorname{diag}(p) - 2pp^\top + pp^\top\langle\sqrt p,\sqrt p\rangle`, and
        :math:`\sum_c p_c = 1`); the others :math:`\operatorname{diag}(\sqrt{h})`. Its
        columns turn the exact Fisher into :math:`C` Jacobian-transpose products."""
        C = z.shape[-1]
        eye = xp.one_hot(xp.arange(C), C, z.dtype)
        d = self._diag(xp, z)
        r = xp.sqrt(d)
        if self.family == "categorical":
            return eye * r[..., None] - d[..., :, None] * r[..., None, :]
        return eye * r[..., None]

    def _diag(self, xp: Namespace, z: Any) -> Any:
        if self.family == "categorical":
            return softmax(xp, z)
        if self.family == "gaussian":
            return xp.ones_like(z) / self._var(xp)
        s_pos, s_neg = _sigmoid_pair(xp, z)
        return s_pos * s_neg

    def sample(self, xp: Namespace, z: Any, noise: Any) -> Any:
        r"""Targets :math:`y \sim p(\cdot \mid z)` from caller-drawn ``noise`` (so that the
        caller owns the seed): categorical by Gumbel-max, :math:`y = \arg\max_c (z_c - \log(-
        \log u_c))` for ``noise`` :math:`u \sim U(0,1)^{C}`; gaussian :math:`z + \sigma
        \varepsilon` for ``noise`` :math:`\varepsilon \sim N(0, I)`; bernoulli
        :math:`\mathbb 1[u < \sigma(z)]` for :math:`u \sim U(0,1)`. ``noise`` has the shape
        of ``z``."""
        _same("sample", z, noise)
        if self.family == "categorical":
            return xp.argmax(z - xp.log(-xp.log(noise)), axis=-1)
        if self.family == "gaussian":
            return z + xp.sqrt(xp.asarray(self._var(xp), dtype=z.dtype)) * noise
        return xp.astype(noise < _sigmoid_pair(xp, z)[0], z.dtype)

    def noise_kind(self) -> Literal["uniform", "normal"]:
        """The distribution :meth:`sample` expects its ``noise`` from."""
        return "normal" if self.family == "gaussian" else "uniform"


ReductionName = Literal["mean", "sum", "sequence_mean", "batch_mean"]
REDUCTIONS: tuple[ReductionName, ...] = ("mean", "sum", "sequence_mean", "batch_mean")


@dataclass(frozen=True)
class Reduction:
    r"""How per-position losses make the batch loss :math:`L = \sum_{b,i} w_{bi}\,\ell_{bi}`.

    With :math:`m_{bi} \in \{0, 1\}` the mask of positions that have a target (0 where the
    target is the ignore-index), :math:`N = \sum_{b,i} m_{bi}`, :math:`N_b = \sum_i m_{bi}`,
    :math:`B` sequences:

    - ``"mean"``: :math:`w = m/N`, the mean over every target of the batch (PyTorch's and
      Hugging Face's default; the graph's ``cross_entropy``);
    - ``"sum"``: :math:`w = m`;
    - ``"sequence_mean"``: :math:`w_{bi} = m_{bi}/(B N_b)`, a mean per sequence, then over
      sequences (differs from ``"mean"`` when lengths differ);
    - ``"batch_mean"``: :math:`w_{bi} = m_{bi}/B`, summed over positions, averaged over
      sequences.

    For rows without a sequence axis (an MLP's examples), ``"mean"`` is :math:`1/N` and
    ``"sum"`` is 1. The curvature of :math:`L` (GGN, Fisher, Hessian) carries the same
    weights; a K-FAC factor of a mean loss is the sum-loss one over :math:`N`.
    """

    name: ReductionName = "mean"

    def __post_init__(self) -> None:
        if self.name not in REDUCTIONS:
            raise UnknownNameError(f"Reduction: {self.name!r}: expected one of "
                                   f"{', '.join(REDUCTIONS)}")

    def weights(self, xp: Namespace, mask: Any) -> Any:
        r"""The weights :math:`w`, shaped as ``mask`` (``(n,)`` rows or ``(B, n)``
        sequences), from the 0/1 ``mask`` of positions with a target."""
        if self.name == "sum":
            return mask
        if self.name == "mean":
            total = xp.sum(mask)
            _require_targets(xp, self.name, total, "the batch has")
            return mask / total
        if mask.ndim < 2 and self.name in ("sequence_mean", "batch_mean"):
            raise ShapeError(f"Reduction {self.name!r}: argument 'mask': expected a (B, n) "
                             f"batch of sequences, got shape {tuple(mask.shape)}")
        B = mask.shape[0]
        if self.name == "batch_mean":
            return mask / B
        counts = xp.sum(mask, axis=-1, keepdims=True)
        _require_targets(xp, self.name, counts, "every sequence needs")
        return mask / (B * counts)


def _require_targets(xp: Namespace, name: str, counts: Any, what: str) -> None:
    """A clear error where a mean would divide by a zero count of targets (concrete masks
    only: traced values and symbols are not inspected)."""
    if not xp.is_concrete(counts):
        return
    host = to_host(counts)
    if any(v == 0 for v in np.ravel(host)):
        raise ShapeError(f"Reduction {name!r}: argument 'mask': {what} at least one target "
                         f"(a position with mask 1), got a count of 0")


def ggn_matrix(xp: Namespace, likelihood: Likelihood, J: Any, z: Any,
               weights: Any = None) -> Any:
    r"""The generalized Gauss–Newton matrix of :math:`L = \sum_p w_p\,\ell(z_p, y_p)`
    (Baggag & Saad §5.2, eq. (5.2.5)):

    .. math:: G = \sum_p w_p\, J_p^\top H(z_p)\, J_p,\qquad H = \nabla_z^2\ell,

    with ``J`` the model's Jacobians :math:`J_p = \partial z_p/\partial w`, shape
    ``(*, C, P)``, ``z`` the outputs ``(*, C)`` and ``weights`` :math:`w` of shape ``(*)``
    (from :meth:`Reduction.weights`; ``None``: all 1, the ``"sum"`` reduction). Returns
    ``(P, P)``. For these natural-parameter likelihoods it is the Fisher (identities
    ``ggn_equals_fisher_*``)."""
    _check_jacobian("ggn_matrix", J, z, weights)
    H = likelihood.hessian(xp, z)
    return _weighted_sum(xp, xp.matmul(xp.matrix_transpose(J), xp.matmul(H, J)), weights)


def empirical_fisher(xp: Namespace, likelihood: Likelihood, J: Any, z: Any, y: Any,
                     weights: Any = None) -> Any:
    r"""The empirical Fisher at the observed targets ``y`` (Baggag & Saad §5.1):

    .. math:: \hat F = \sum_p w_p\, J_p^\top \nabla_z\ell(z_p, y_p)\,
       \nabla_z\ell(z_p, y_p)^\top J_p ,

    shapes as in :func:`ggn_matrix` (``y`` as :meth:`Likelihood.nll` takes it). A sum of
    one outer product per position: its rank is at most the number of positions. Its
    expectation over :math:`y_p \sim p(\cdot\mid z_p)` is the Fisher (identities
    ``ggn_equals_fisher_*``); it is *not* the Fisher at the data (identity
    ``empirical_fisher_is_not_fisher``)."""
    _check_jacobian("empirical_fisher", J, z, weights)
    u = xp.matmul(xp.matrix_transpose(J), likelihood.grad(xp, z, y)[..., None])  # (*, P, 1)
    return _weighted_sum(xp, xp.matmul(u, xp.matrix_transpose(u)), weights)


def _weighted_sum(xp: Namespace, per_position: Any, weights: Any) -> Any:
    if weights is not None:
        per_position = per_position * weights[..., None, None]
    lead = tuple(range(per_position.ndim - 2))
    return xp.sum(per_position, axis=lead) if lead else per_position


def _check_jacobian(what: str, J: Any, z: Any, weights: Any) -> None:
    js, zs = tuple(getattr(J, "shape", ())), tuple(getattr(z, "shape", ()))
    if len(js) < 2 or js[:-1] != zs:
        raise ShapeError(f"{what}: argument 'J': expected shape {(*zs, 'P')} (the shape of "
                         f"'z' then the number of parameters), got {js}")
    if weights is not None and tuple(getattr(weights, "shape", ())) != zs[:-1]:
        raise ShapeError(f"{what}: argument 'weights': expected shape {zs[:-1]} (one weight "
                         f"per position of 'z'), got {tuple(getattr(weights, 'shape', ()))}")


def _same(what: str, z: Any, y: Any) -> None:
    zs, ys = tuple(getattr(z, "shape", ())), tuple(getattr(y, "shape", ()))
    if zs != ys:
        raise ShapeError(f"{what}: expected an array of shape {zs} (the shape of 'z'), got {ys}")


#: the graph's loss ops read as likelihood and reduction (what a Fisher of them means)
LOSS_LIKELIHOODS: dict[str, tuple[Likelihood, Reduction]] = {
    "cross_entropy": (Likelihood("categorical"), Reduction("mean")),
    "half_squared_error": (Likelihood("gaussian", 1), Reduction("sum")),
}


def likelihood_of(op: str) -> tuple[Likelihood, Reduction]:
    """The likelihood and reduction a graph loss op stands for; a loss with none (no Fisher
    exists for it) is an error naming the op and the ones that have one."""
    try:
        return LOSS_LIKELIHOODS[op]
    except KeyError:
        raise ArgumentError(
            f"loss op {op!r} has no likelihood interpretation, so it has no Fisher (and no "
            f"GGN-Fisher equivalence): expected a loss node computed by one of "
            f"{', '.join(sorted(LOSS_LIKELIHOODS))}") from None
