"""Row-wise softmax and log-softmax, numerically stable (forward and VJP).

Baggag & Saad §3.4.2. The stable form subtracts a per-row constant :math:`c` before
:math:`\\exp`; the lemma ``softmax_shift_invariance`` proves
:math:`\\operatorname{softmax}(z - c\\mathbf 1) = \\operatorname{softmax}(z)` for every
real :math:`c`, so the function proved on the exact namespace (symbolic
:math:`c`) and the one run in floating point (:math:`c = \\max_j z_j`) are the
same function.

**Hostile logits** (``docs/guide/precision.md``, "Inputs that break naive kernels"):

* *Any finite magnitude* (:math:`\\pm 10^4` and beyond): after the shift every exponent is
  :math:`\\le 0` and the largest is exactly :math:`0`, so nothing overflows and the
  denominator :math:`\\sum_j e^{z_j - c} \\ge 1` cannot underflow (lemma
  ``softmax_denominator_at_least_one``). Without the shift, :math:`e^{z}` overflows
  for :math:`z \\gtrsim 709` (float64) or :math:`88` (float32), and :math:`\\sum_j e^{z_j}`
  underflows to :math:`0` (hence :math:`0/0`) for rows below :math:`-745` or :math:`-104`.
* *Equal logits*: every shifted exponent is exactly :math:`0`, so :math:`p = 1/m`.
* :math:`-\\infty` *entries* (masked positions): :math:`p_j = 0`, no cotangent.
* *All-masked rows* (every entry :math:`-\\infty`), where the definition reads
  :math:`0/0`. **Convention ("safe softmax", as in FlashAttention-style kernels): the
  softmax of an all-masked row is a row of zeros and its VJP is zero**, so a query that
  may attend to no key (padding) contributes nothing, and nothing becomes ``nan``. The
  floating backends implement it with two namespace hooks, leaving the exact
  namespace and its proofs untouched: :meth:`~nlaverify.backends.base.Namespace.
  stability_shift` returns :math:`0` instead of :math:`-\\infty` on such a row, and
  :meth:`~nlaverify.backends.base.Namespace.safe_row_sum` returns :math:`1` instead of
  a zero denominator (which, by the lemma above, happens on no other row).
* **Log-softmax of an all-masked row raises** :class:`~nlaverify.errors.NonFiniteError`
  on concrete inputs: every :math:`\\log p_j` would be :math:`-\\infty`, there is no
  distribution to take the log of, and any loss built on that row is :math:`+\\infty` or
  ``nan``; returning a silent :math:`-\\infty` row would poison a training step far from
  its cause. Drop such rows instead (the ignore-index of the loss). Values that cannot
  be inspected (inside ``jax.jit``) are not checked: there the row comes out as
  :math:`-\\infty` everywhere, the logarithm of the safe-softmax zero row.
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import jvp_rule
from nlaverify.ops._validate import check_args

#: the conventions for an all-masked row (every entry :math:`-\infty`): a row of zeros
#: (nlaverify, FlashAttention's "safe softmax") or NaN (``torch.softmax``, ``jax.nn.softmax``)
MASKED_ROWS = ("zero", "nan")


def softmax(xp: Namespace, Z: Any, axis: int = -1, masked_row: str = "zero") -> Any:
    r"""Softmax along ``axis`` (Baggag & Saad §3.4.2, Baptista–Stuart–Tran §2):

    .. math:: p_i = \frac{e^{z_i - c}}{\sum_j e^{z_j - c}},\qquad c = \max_j z_j .

    An all-masked row (every :math:`z_j = -\infty`) gives a row of zeros (see the module
    docstring), or NaN with ``masked_row="nan"`` (torch's and JAX's convention).
    """
    check_args("softmax", xp, {"Z": (Z, ("*", "m"))}, neg_inf_ok=("Z",))
    if masked_row not in MASKED_ROWS:
        from nlaverify.errors import ArgumentError

        raise ArgumentError(f"softmax: argument 'masked_row': expected one of "
                            f"{', '.join(MASKED_ROWS)}, got {masked_row!r}")
    E = xp.exp(Z - xp.stability_shift(Z, axis))
    P = E / xp.safe_row_sum(E, axis)
    return xp.nan_masked_rows(P, E, axis) if masked_row == "nan" else P


def softmax_vjp_from_output(xp: Namespace, G: Any, P: Any, axis: int = -1) -> Any:
    r"""Softmax VJP from its output :math:`P` (Baggag & Saad §3.4.2):

    .. math:: \bar z = J^\top g = p \odot \bigl(g - (g^\top p)\mathbf 1\bigr),
       \qquad J = \operatorname{diag}(p) - p p^\top .

    Applied to attention scores this is :math:`dS = P \odot (dP - \operatorname{rowsum}(dP
    \odot P))`. An all-masked row has :math:`p = 0`, hence :math:`\bar z = 0`.
    """
    return P * (G - xp.sum(G * P, axis=axis, keepdims=True))


def softmax_vjp(xp: Namespace, G: Any, Z: Any, axis: int = -1,
                masked_row: str = "zero") -> tuple[Any]:
    r"""VJP of :func:`softmax`: :math:`\bar z = p \odot (g - \langle g, p\rangle)` (NaN on an
    all-masked row under ``masked_row="nan"``, as torch's and JAX's)."""
    check_args("softmax_vjp", xp, {"Z": (Z, ("*", "m")), "G": (G, ("*", "m"))},
               neg_inf_ok=("Z",))
    return (softmax_vjp_from_output(xp, G, softmax(xp, Z, axis, masked_row), axis),)


def softmax_jvp_from_output(xp: Namespace, T: Any, P: Any, axis: int = -1) -> Any:
    r"""Softmax JVP from its output :math:`P` (Baggag & Saad §3.4.2): the Jacobian
    :math:`J = \operatorname{diag}(p) - p p^\top` is symmetric, so the JVP is the VJP's
    formula applied to the tangent,

    .. math:: \dot p = J\dot z = p \odot \bigl(\dot z - \langle p, \dot z\rangle
       \mathbf 1\bigr);

    for attention scores, :math:`\dot P = P \odot (\dot S - \operatorname{rowsum}(\dot S
    \odot P))`. A masked entry (:math:`p_j = 0`) and an all-masked row get no tangent.
    """
    return softmax_vjp_from_output(xp, T, P, axis)


@jvp_rule("dZ",)
def softmax_jvp(xp: Namespace, T: tuple[Any], Z: Any, axis: int = -1,
                masked_row: str = "zero") -> Any:
    r"""JVP of :func:`softmax` (Baggag & Saad §3.4.2), from the stable forward:
    :math:`\dot p = p \odot (\dot z - \langle p, \dot z\rangle)`."""
    check_args("softmax_jvp", xp, {"Z": (Z, ("*", "m")), "dZ": (T[0], ("*", "m"))},
               neg_inf_ok=("Z",))
    return softmax_jvp_from_output(xp, T[0], softmax(xp, Z, axis, masked_row), axis)


def softmax_jacobian(xp: Namespace, p: Any) -> Any:
    r"""Explicit Jacobian of softmax at a probability vector ``p`` of length ``m``:
    :math:`J = \operatorname{diag}(p) - p p^\top` (Baggag & Saad §3.4.2)."""
    check_args("softmax_jacobian", xp, {"p": (p, ("m",))})
    col = xp.reshape(p, (-1, 1))
    eye = xp.one_hot(xp.arange(p.shape[0]), p.shape[0], p.dtype)
    return eye * col - xp.matmul(col, xp.matrix_transpose(col))


def log_softmax(xp: Namespace, Z: Any, axis: int = -1) -> Any:
    r"""Stable log-softmax (log-sum-exp with the same shift :math:`c`):

    .. math:: \log p_i = (z_i - c) - \log\sum_j e^{z_j - c}.

    A :math:`-\infty` entry gives :math:`\log p_i = -\infty` (its probability is 0).

    Raises:
        NonFiniteError: a row whose entries are all :math:`-\infty` (all-masked), on
            concrete inputs; see the module docstring.
    """
    check_args("log_softmax", xp, {"Z": (Z, ("*", "m"))}, neg_inf_ok=("Z",))
    _reject_all_masked_rows("log_softmax", xp, Z, axis)
    S = Z - xp.stability_shift(Z, axis)
    return S - xp.log(xp.safe_row_sum(xp.exp(S), axis))


def log_softmax_vjp(xp: Namespace, G: Any, Z: Any, axis: int = -1) -> tuple[Any]:
    r"""VJP of :func:`log_softmax`: :math:`\bar z = g - p\,(\mathbf 1^\top g)`.

    Raises:
        NonFiniteError: as :func:`log_softmax`.
    """
    check_args("log_softmax_vjp", xp, {"Z": (Z, ("*", "m")), "G": (G, ("*", "m"))},
               neg_inf_ok=("Z",))
    _reject_all_masked_rows("log_softmax_vjp", xp, Z, axis)
    return (G - softmax(xp, Z, axis) * xp.sum(G, axis=axis, keepdims=True),)


@jvp_rule("dZ",)
def log_softmax_jvp(xp: Namespace, T: tuple[Any], Z: Any, axis: int = -1) -> Any:
    r"""JVP of :func:`log_softmax` (Baggag & Saad §3.1, §3.13.1): the Jacobian is
    :math:`I - \mathbf 1 p^\top`, so :math:`\dot y = \dot z - \langle p, \dot z\rangle
    \mathbf 1`. A masked entry (:math:`z_j = -\infty`, :math:`p_j = 0`) gets
    :math:`\dot z_j - \langle p, \dot z\rangle`, as autodiff of the forward gives (and as
    the VJP passes :math:`g_j` back to it).

    Raises:
        NonFiniteError: as :func:`log_softmax`.
    """
    check_args("log_softmax_jvp", xp, {"Z": (Z, ("*", "m")), "dZ": (T[0], ("*", "m"))},
               neg_inf_ok=("Z",))
    _reject_all_masked_rows("log_softmax_jvp", xp, Z, axis)
    return T[0] - xp.sum(softmax(xp, Z, axis) * T[0], axis=axis, keepdims=True)


def _reject_all_masked_rows(op: str, xp: Namespace, Z: Any, axis: int) -> None:
    """Raise :class:`~nlaverify.errors.NonFiniteError` when a row of ``Z`` along ``axis`` is
    entirely ``-inf``; the exact namespace and traced values are not inspected. The test
    runs where ``Z`` lives; only the error message moves it to the host."""
    if xp.exact or not xp.is_concrete(Z):
        return
    import numpy as np

    from nlaverify.backends.host import to_host
    from nlaverify.errors import NonFiniteError

    if xp.object_arrays or xp.name == "jax":  # object arrays; a constant inside a trace
        masked = np.all(np.asarray(to_host(Z)) == -np.inf, axis=axis)
        if not bool(np.any(masked)):
            return
    else:
        masked = xp.all(Z == -xp.inf, axis=axis)
        if not bool(xp.any(masked)):
            return
        masked = to_host(masked)
    masked = np.asarray(masked, dtype=bool)
    rows = [tuple(int(i) for i in r) if len(r) != 1 else int(r[0]) for r in np.argwhere(masked)]
    where = ("" if masked.ndim == 0 else " at index " + ", ".join(map(str, rows[:5]))
             + (", ..." if len(rows) > 5 else ""))
    raise NonFiniteError(
        f"{op}: argument 'Z': expected at least one entry > -inf in every row along axis "
        f"{axis} (log-softmax of an all-masked row is -inf everywhere: there is no "
        f"distribution), got {len(rows)} row(s) with every entry -inf{where}")
