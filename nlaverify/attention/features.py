r"""Seeded draws of random-feature parameters: Gaussian and orthogonal projections, phases.

The random-feature estimators of :mod:`nlaverify.attention.estimators` (Performer,
Choromanski et al. 2021; Baggag & Saad §4.4) need rows :math:`w_i \sim N(0, I_d)` and, for the
trigonometric features, phases :math:`b_i \sim U(0, 2\pi)`. Every draw here is a pure function
of an integer seed (a :class:`numpy.random.Generator` built from it), returns float64 host
arrays, and is reproducible bit for bit.

**Orthogonal random features** (Choromanski et al. 2021, §3 and Thm 2). Rows are drawn in blocks
of :math:`d` exactly orthogonal directions. A block is :math:`Q^\top` for the QR factorisation
:math:`G = QR` of a Gaussian :math:`d \times d` matrix, with :math:`Q`'s columns multiplied by
:math:`\operatorname{sign}(R_{kk})`: that makes :math:`Q` Haar distributed (the factorisation
with a positive diagonal of :math:`R` is unique, and :math:`G \mapsto HG` for orthogonal
:math:`H` maps it to :math:`HQ`), so each direction is uniform on the sphere. Each row is then
scaled by an independent :math:`\chi_d` length :math:`\|g\|`, :math:`g \sim N(0, I_d)`; a
uniform direction times an independent :math:`\chi_d` length is :math:`N(0, I_d)`, so **each
row is marginally** :math:`N(0, I_d)` and every estimator that is a sum of one-row terms keeps
its mean: unbiasedness needs the marginals only, never independence.

``fix_signs=False`` is the classic bug: LAPACK's Householder QR returns
:math:`R_{kk} = -\operatorname{sign}(\alpha_k)\,\|\cdot\|` (:math:`\alpha_k` the pivot of the
partially reduced matrix), so :math:`Q` is a deterministic function of a Haar matrix that is
*not* Haar. For :math:`d = 2` it is exact and simple: :math:`Q_{00} < 0` and :math:`Q_{11} > 0`
always, the first row of the block is uniform on the half circle :math:`\{u_1 < 0\}` and the
second on :math:`\{u_2 > 0\}`, i.e. :math:`w_1 \overset{d}{=} (-|g_1|, g_2)` and
:math:`w_2 \overset{d}{=} (g_1, |g_2|)`; see
:func:`nlaverify.attention.estimators.unfixed_qr_positive_mean` for the resulting bias.
"""

from __future__ import annotations

import numpy as np

from nlaverify.errors import ArgumentError

__all__ = ["draw_gaussian", "draw_orthogonal", "draw_phases", "orthogonal_blocks"]


def _check_sizes(op: str, **sizes: int) -> None:
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ArgumentError(f"{op}: argument {name!r}: expected an integer >= 1, got {v!r}")


def _lead(op: str, replicates: int | None) -> tuple[int, ...]:
    if replicates is None:
        return ()
    _check_sizes(op, replicates=replicates)
    return (int(replicates),)


def draw_gaussian(seed: int, m: int, d: int, *, replicates: int | None = None) -> np.ndarray:
    r"""``m`` i.i.d. rows :math:`w_i \sim N(0, I_d)`: an :math:`m \times d` float64 matrix
    (Performer's unstructured features, Choromanski et al. 2021; Baggag & Saad §4.4);
    ``replicates=R`` gives ``R`` independent draws, shape ``(R, m, d)``."""
    _check_sizes("draw_gaussian", m=m, d=d)
    lead = _lead("draw_gaussian", replicates)
    return np.random.default_rng(seed).standard_normal((*lead, m, d))


def draw_phases(seed: int, m: int, *, replicates: int | None = None) -> np.ndarray:
    r"""``m`` i.i.d. phases :math:`b_i \sim U(0, 2\pi)` of the trigonometric features
    :math:`\sqrt{2/m}\cos(w_i^\top x + b_i)` (Rahimi & Recht 2007; Baggag & Saad §4.4);
    ``replicates=R``: shape ``(R, m)``."""
    _check_sizes("draw_phases", m=m)
    lead = _lead("draw_phases", replicates)
    return np.random.default_rng(seed).uniform(0.0, 2.0 * np.pi, size=(*lead, m))


def orthogonal_blocks(rng: np.random.Generator, count: int, d: int, *,
                      fix_signs: bool = True) -> np.ndarray:
    r"""``count`` independent :math:`d \times d` blocks of orthonormal rows :math:`Q^\top`,
    :math:`G = QR`, :math:`G \sim N(0, 1)^{d \times d}` (shape ``(count, d, d)``, one batched
    QR); with ``fix_signs`` the columns of :math:`Q` are multiplied by
    :math:`\operatorname{sign}(R_{kk})` (Haar :math:`Q`), without it they are LAPACK's (biased;
    see the module docstring)."""
    q, r = np.linalg.qr(rng.standard_normal((count, d, d)))
    if fix_signs:
        s = np.sign(np.diagonal(r, axis1=-2, axis2=-1))
        s = np.where(s == 0, 1.0, s)  # probability zero; keeps the block orthogonal anyway
        q = q * s[:, None, :]
    return np.swapaxes(q, -1, -2)


def draw_orthogonal(seed: int, m: int, d: int, *, fix_signs: bool = True,
                    replicates: int | None = None) -> np.ndarray:
    r"""``m`` orthogonal random features: :math:`\lceil m/d \rceil` independent blocks of
    :math:`d` orthonormal rows (:func:`orthogonal_blocks`), the last one truncated, each row
    scaled by an independent :math:`\chi_d` length (Choromanski et al. 2021, §3):

    .. math:: w_i = \|g_i\|\, q_i, \qquad g_i \sim N(0, I_d),\quad
       q_i^\top q_j = \delta_{ij} \text{ within a block.}

    With ``fix_signs=True`` (default) each :math:`w_i` is marginally :math:`N(0, I_d)`, so the
    random-feature estimators stay unbiased; ``fix_signs=False`` reproduces the classic bug
    (QR without fixing the signs of :math:`R`'s diagonal), which biases the positive estimator.
    ``replicates=R`` gives ``R`` independent draws, shape ``(R, m, d)``.
    """
    _check_sizes("draw_orthogonal", m=m, d=d)
    lead = _lead("draw_orthogonal", replicates)
    R, per = (lead[0] if lead else 1), -(-m // d)
    rng = np.random.default_rng(seed)
    blocks = orthogonal_blocks(rng, R * per, d, fix_signs=fix_signs)
    rows = np.reshape(blocks, (R, per * d, d))[:, :m]
    lengths = np.linalg.norm(rng.standard_normal((R, m, d)), axis=-1)
    out = rows * lengths[..., None]
    return out if lead else out[0]
