r"""The figures of the state-space chapter (Baptista, Stuart & Tran §5.3.4, App. C; Gu & Dao
2023): ``docs/figures/ssm.svg``.

* **Cost against sequence length.** FLOPs of one layer's sequence mixing, counted in the
  running code (the jaxpr of :func:`nlaverify.ops.ssm.selective_scan` and of the causal
  :func:`nlaverify.ops.sdpa.attention`, :func:`nlaverify.cost.count.count_jaxpr`), at
  :math:`d` channels, :math:`N` states, one head of size :math:`d`: the scan's count is
  exactly affine in :math:`L` (:math:`c_1 L + c_0`, :math:`c_0 = -2dN`: the first step has no
  :math:`\bar A x_{-1}`; checked at every counted length),
  attention's is :math:`c_2 L^2 + c_3 L` (the scores and the values of every pair, masked
  ones included, as the code computes them).
* **Discretization error against the step.** One step of :math:`x' = a x + b u` with
  constant input from :math:`x_0`, against the exact solution :math:`e^{a\Delta}x_0 +
  \varphi_1(a\Delta)\Delta b u` (mpmath, 50 digits): zero-order hold is exact (its error is
  the rounding of float64), Mamba's Euler :math:`\bar B` is off by :math:`\tfrac12 a b u
  \Delta^2 + O(\Delta^3)` (identity ``ssm_euler_b_error``), the bilinear rule by
  :math:`O(\Delta^3)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["discretization_errors", "draw_ssm_figure", "mixing_flops"]


def mixing_flops(lengths: list[int], d: int = 64, N: int = 16) -> dict[str, list[int]]:
    r"""FLOPs of the selective scan (Mamba's rule, softplus :math:`\Delta`, skip :math:`D`,
    gate :math:`z`) and of causal attention (one head of size :math:`d`) at each length,
    counted in the jaxpr of the running functions (shapes only: nothing is computed)."""
    import jax

    from nlaverify.backends import get_namespace
    from nlaverify.cost.count import count_jaxpr
    from nlaverify.ops import sdpa, ssm

    xp = get_namespace("jax")
    f32 = np.float32
    out: dict[str, list[int]] = {"scan": [], "attention": []}
    for L in lengths:
        S = jax.ShapeDtypeStruct
        scan = jax.make_jaxpr(lambda u, dl, A, B, C, D, z: ssm.selective_scan(
            xp, u, dl, A, B, C, D=D, z=z, delta_softplus=True))(
            S((L, d), f32), S((L, d), f32), S((d, N), f32), S((L, N), f32), S((L, N), f32),
            S((d,), f32), S((L, d), f32))
        att = jax.make_jaxpr(lambda q, k, v: sdpa.attention(xp, q, k, v, causal=True))(
            S((L, d), f32), S((L, d), f32), S((L, d), f32))
        out["scan"].append(count_jaxpr(scan).flops)
        out["attention"].append(count_jaxpr(att).flops)
    return out


def discretization_errors(deltas: Any, a: float = -1.5, b: float = 0.8, u: float = 1.0,
                          x0: float = 0.3) -> dict[str, np.ndarray]:
    r"""The one-step error of each discretization (float64) against the exact solution
    (mpmath, 50 digits), at each step :math:`\Delta`, and the leading term
    :math:`\tfrac12|a b u|\Delta^2` of Mamba's rule."""
    import mpmath

    from nlaverify.backends import get_namespace
    from nlaverify.ops import ssm

    xp = get_namespace("numpy")
    rules = {"zoh": ssm.discretize_zoh, "zoh_euler": ssm.discretize_zoh_euler,
             "bilinear": ssm.discretize_bilinear}
    errors: dict[str, list[float]] = {k: [] for k in rules}
    with mpmath.workdps(50):
        for dt in np.asarray(deltas, dtype=np.float64):
            z = mpmath.mpf(a) * mpmath.mpf(dt)
            exact = (mpmath.exp(z) * x0
                     + mpmath.expm1(z) / z * mpmath.mpf(dt) * b * u)
            for name, rule in rules.items():
                Ab, Bb = rule(xp, np.float64(dt), np.float64(a), np.float64(b))
                got = float(Ab) * x0 + float(Bb) * u
                errors[name].append(abs(float(mpmath.mpf(got) - exact)))
    out = {k: np.asarray(v) for k, v in errors.items()}
    out["euler_b_leading"] = 0.5 * abs(a * b * u) * np.asarray(deltas, dtype=np.float64) ** 2
    return out


def draw_ssm_figure(path: Path | str) -> Path:
    """Both panels (module docstring), written reproducibly to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.symbolic.document import save_svg

    lengths = [16, 32, 64, 128, 256]
    flops = mixing_flops(lengths)
    L = np.asarray(lengths, dtype=np.float64)
    scan = np.asarray(flops["scan"], dtype=np.int64)
    # affine in L, exactly: c1 per token, and the first step has no A-bar x_{-1} (c0 < 0)
    c1 = int((scan[1] - scan[0]) // (lengths[1] - lengths[0]))
    c0 = int(scan[0] - c1 * lengths[0])
    if not np.array_equal(scan, c1 * np.asarray(lengths) + c0):
        raise AssertionError(f"the scan's count is not affine in L: {scan.tolist()}")
    far = np.geomspace(16, 65536, 13)
    # attention's count, fitted exactly by c2 L^2 + c3 L on the counted lengths
    fit = np.linalg.lstsq(np.stack([L**2, L], 1), np.asarray(flops["attention"], float),
                          rcond=None)[0]
    c2, c3 = (round(float(c)) for c in fit)
    if not np.array_equal(np.asarray(flops["attention"]), c2 * L.astype(np.int64) ** 2
                          + c3 * L.astype(np.int64)):
        raise AssertionError(f"attention's count is not c2 L^2 + c3 L: {flops['attention']}")
    deltas = np.geomspace(1e-4, 1.0, 25)
    err = discretization_errors(deltas)
    with matplotlib.rc_context({"svg.hashsalt": "nlaverify", "font.size": 8}):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 3.9))
        left.loglog(far, c1 * far + c0, color="C0", lw=1.2,
                    label=f"selective scan: {c1} L − {-c0}")
        left.loglog(far, c2 * far**2 + c3 * far, color="C3", lw=1.2,
                    label=f"causal attention: {c2} L² + {c3} L")
        left.loglog(L, flops["scan"], "o", color="C0", ms=4, label="counted in the code")
        left.loglog(L, flops["attention"], "s", color="C3", ms=4, mfc="none",
                    label="counted in the code")
        left.set_xlabel("sequence length L")
        left.set_ylabel("FLOPs of one layer's mixing (d = 64, N = 16)")
        left.set_title("Linear against quadratic", fontsize=9)
        left.legend(fontsize=7, loc="upper left", frameon=False)
        right.loglog(deltas, np.maximum(err["zoh"], 1e-18), "o", ms=3, color="C2",
                     label="zero-order hold (exact: float64 rounding)")
        right.loglog(deltas, err["zoh_euler"], color="C1", lw=1.2,
                     label="Mamba's rule (ZOH for A, Euler for B)")
        right.loglog(deltas, err["euler_b_leading"], color="k", ls="--", lw=0.8,
                     label="½|a b u| Δ² (proved leading term)")
        right.loglog(deltas, err["bilinear"], color="C4", lw=1.0, label="bilinear")
        right.set_xlabel("step Δ")
        right.set_ylabel("one-step error against the exact ODE")
        right.set_title("Discretization of x' = a x + b u, a = -1.5", fontsize=9)
        right.legend(fontsize=7, loc="upper left", frameon=False)
        fig.suptitle("State-space models (Baptista, Stuart & Tran §5.3.4, App. C): cost and "
                     "discretization", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        out = save_svg(fig, path)
        plt.close(fig)
    return out
