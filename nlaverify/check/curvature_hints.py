r"""What a failing curvature product equals instead (:func:`~nlaverify.check.curvature.
check_curvature`'s diagnosis, Baggag & Saad §5.2): the classic mistakes of assembling
:math:`J^\top H_{\ell} J v` tried one by one on the failing probe, each judged with the same
bound as the check. A note names the one the user's product matches: the loss Hessian left
out (:math:`J^\top W J v`), only the diagonal of the categorical Hessian
(:math:`\operatorname{diag}(p)`, the :math:`-pp^\top` term dropped), the position weights left
out (a sum for the mean), another kind (Hessian, Fisher, empirical Fisher), or a constant
factor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nlaverify.errors import NlaverifyError

__all__ = ["curvature_hints"]


def _variants(mc: Any, kind: str, kinds: tuple[str, ...]) -> dict[str, Callable[[Any], Any]]:
    """Flat maps ``v -> C'v`` of the mistakes, by the note that names them."""
    import jax

    from nlaverify.curvature.likelihoods import Likelihood

    out: dict[str, Callable[[Any], Any]] = {}
    for other in kinds:
        if other == kind:
            continue
        try:
            out[f"the {other} product (kind={other!r}), not the {kind}"] = mc.operator(other)
        except NlaverifyError:
            continue
    if mc.outputs is None or kind not in ("ggn", "fisher"):
        return out
    z, pullback = jax.vjp(mc.outputs, mc.flat)
    wz = mc.weights[..., None]

    def through(space: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return jax.jit(lambda v: pullback(space(jax.jvp(mc.outputs, (mc.flat,), (v,))[1]))[0])

    out["J^T W J v: the loss Hessian H_l left out (taken as the identity)"] = through(
        lambda u: wz * u)
    lik = mc.likelihood
    if isinstance(lik, Likelihood) and lik.family == "categorical":
        out["J^T W diag(p) J v: only the diagonal of the categorical loss Hessian "
            "(its -p p^T term dropped)"] = through(lambda u: wz * jax.nn.softmax(z, -1) * u)
    if isinstance(lik, Likelihood):
        from nlaverify.backends import get_namespace

        xp = get_namespace("jax")
        out["J^T H_l J v without the position weights (a sum where the mean is meant)"] = \
            through(lambda u: lik.hvp(xp, z, u))
    return out


def curvature_hints(mc: Any, kind: str, v: Any, actual: np.ndarray, expected: np.ndarray,
                    tol: Any, kinds: tuple[str, ...]) -> list[str]:
    """Notes naming what ``actual`` (the user's flat product on probe ``v``) equals, where
    the reference ``expected`` of ``kind`` is not met: each classic mistake of
    :func:`_variants` (the other ``kinds`` among them) within ``tol``, else a constant
    factor fitted by least squares."""
    notes = []
    for label, op in _variants(mc, kind, kinds).items():
        ref = np.asarray(op(v))
        if np.any(ref != expected) and tol.compare(actual, ref).ok:
            notes.append(f"your product equals {label}")
    if notes:
        return notes
    denom = float(np.dot(expected, expected))
    if denom > 0:
        c = float(np.dot(actual, expected)) / denom
        if abs(c - 1.0) > tol.rtol and tol.compare(actual, c * expected).ok:
            notes.append(f"your product is {c:.6g} times the {kind} product (a reduction or "
                         "scale convention: the mean over positions, 1/N, a factor 2)")
    return notes
