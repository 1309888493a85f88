"""Scaling laws (issue 20, item 2): the Chinchilla law's compute-optimal allocation (proved
by ``chinchilla_compute_optimal`` on :func:`nlaverify.scaling.compute_optimal`, checked here
against a numerical minimisation), the fitter of Hoffmann et al. recovering planted
constants, and ``nlaverify scaling``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from nlaverify import scaling as sc
from nlaverify.cli import main
from nlaverify.identities.scaling import derive_compute_optimal
from nlaverify.tolerance import tolerance, unit_roundoff


@pytest.mark.parametrize("name", list(sc.LAWS))
@pytest.mark.parametrize("budget", [1e19, 5.76e23, 1e26])
def test_the_allocation_is_the_numerical_minimum(name: str, budget: float) -> None:
    law = sc.LAWS[name]
    n_star, d_star = sc.compute_optimal(budget, law)
    # a handful of float64 powers and products (compute_optimal, then 6ND)
    spent = tolerance("float64", depth=8)
    assert spent.compare(sc.training_flops(n_star, d_star), budget, floor=0).ok
    res = minimize_scalar(lambda u: law.loss(math.exp(u), budget / (6 * math.exp(u))),
                          bounds=(math.log(1e3), math.log(budget / 6 / 1e3)), method="bounded",
                          options={"xatol": 1e-10})
    # the loss is flat at its minimum: its argmin in u = log N is known only to
    # sqrt(2 D u L* / L''), D = 8 roundings of L, L'' = A a^2 N^-a + B b^2 D^-b its curvature
    # in u (~2e-7 here), plus Brent's own step sqrt(u) |u*|; a 1e-3 error in an exponent
    # moves the argmin by ~1e-2 and fails
    eps = unit_roundoff("float64")
    curv = (law.A * law.alpha ** 2 * n_star ** -law.alpha
            + law.B * law.beta ** 2 * d_star ** -law.beta)
    loss_star = law.loss(n_star, d_star)
    bound = math.sqrt(2 * 8 * eps * loss_star / curv) + math.sqrt(eps) * abs(math.log(n_star))
    assert abs(res.x - math.log(n_star)) <= bound, (res.x, math.log(n_star), bound)
    assert loss_star <= res.fun + 8 * eps * loss_star


def test_the_identity_is_proved_and_refutes_a_planted_exponent(monkeypatch) -> None:
    assert derive_compute_optimal().verdict == "proved"
    def swapped(C, law):  # the exponents a and b exchanged
        s = law.alpha + law.beta
        G = (law.alpha * law.A / (law.beta * law.B)) ** (1 / s)
        return G * (C / 6) ** (law.alpha / s), (C / 6) ** (law.beta / s) / G

    monkeypatch.setattr(sc, "compute_optimal", swapped)
    assert derive_compute_optimal().verdict == "failed"


def _runs(law: sc.ChinchillaLaw, noise: float, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    N = 10 ** rng.uniform(7, 10, 60)
    D = 10 ** rng.uniform(9, 12, 60)
    L = law.loss(N, D) * np.exp(noise * rng.standard_normal(60))
    return N, D, L


GRID = [(a, b, e, 0.5, 0.5) for a in (0.0, 5.0) for b in (0.0, 5.0) for e in (0.0, 0.5)]


def test_the_fitter_recovers_planted_constants() -> None:
    """Noise-free runs of the Hoffmann law: every constant back to 1e-3 relative (a wrong
    gradient or objective stops L-BFGS far from it); with 1 % noise on the loss the exponents
    stay within 0.03 of the truth (10 % of alpha = 0.034 would fail)."""
    truth = sc.LAWS["hoffmann2022"]
    fit = sc.fit_chinchilla(*_runs(truth, 0.0, 0), grid=GRID).law
    for key in ("E", "A", "B", "alpha", "beta"):
        assert math.isclose(getattr(fit, key), getattr(truth, key), rel_tol=1e-3), (key, fit)
    noisy = sc.fit_chinchilla(*_runs(truth, 0.01, 1), grid=GRID).law
    assert abs(noisy.alpha - truth.alpha) < 0.03 and abs(noisy.beta - truth.beta) < 0.03, noisy


def test_the_fitter_refuses_bad_data() -> None:
    from nlaverify.errors import ArgumentError

    with pytest.raises(ArgumentError, match="one length >= 5"):
        sc.fit_chinchilla([1e9] * 3, [1e10] * 3, [2.0] * 3)
    with pytest.raises(ArgumentError, match="positive"):
        sc.fit_chinchilla([1e9] * 5, [1e10] * 5, [2.0, 2.0, -1.0, 2.0, 2.0])
    with pytest.raises(ArgumentError, match="finite"):
        sc.fit_chinchilla([1e9] * 5, [1e10] * 5, [2.0, 2.0, float("inf"), 2.0, 2.0])
    with pytest.raises(ArgumentError, match="grid"):
        sc.fit_chinchilla([1e9, 2e9, 3e9, 4e9, 5e9], [1e10] * 5, [2.0] * 5, grid=[])


def test_the_command(capsys) -> None:
    assert main(["scaling", "--budget", "5.76e23", "--json"]) == 0
    rows = {r["law"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert set(rows) == set(sc.LAWS)
    assert 15 < rows["besiroglu2024"]["tokens_per_param"] < 25  # the replication: about 20
    assert main(["scaling", "--budget", "1e21", "--law", "hoffmann2022"]) == 0
    assert "hoffmann2022" in capsys.readouterr().out
    assert main(["scaling", "--budget", "1e21", "--law", "nope"]) == 2
    assert "unknown law 'nope'" in capsys.readouterr().err


def test_the_isoflop_figure_is_reproducible(tmp_path) -> None:
    """The committed figure is what draw_isoflop writes, byte for byte (fixed hash salt, no
    date, text kept as text), with the pinned kernels the figure command uses."""
    import subprocess
    import sys
    from pathlib import Path

    from nlaverify.reproducible import pinned_environment

    out = tmp_path / "iso.svg"
    subprocess.run([sys.executable, "-c", "import sys; from nlaverify.scaling import "
                    "draw_isoflop; draw_isoflop(sys.argv[1])", str(out)],
                   env=pinned_environment(), check=True)
    committed = Path(__file__).resolve().parents[1] / "docs/figures/chinchilla_isoflop.svg"
    assert out.read_bytes() == committed.read_bytes()
