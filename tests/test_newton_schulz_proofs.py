"""The ``newton_schulz`` identities: each is proved, and each fails when the running code it
certifies is broken (a planted error through ``monkeypatch``)."""

from __future__ import annotations

import importlib
from fractions import Fraction

import pytest

from nlaverify.curvature import shampoo as sh
from nlaverify.identities import newton_schulz as nsid
from nlaverify.identities.core import get_identity
from nlaverify.optim import certify as ce
from nlaverify.optim import newton_schulz as ns

IDS = ["ns_step_acts_on_singular_values", "ns_transpose_trick", "ns_cubic_quadratic_convergence",
       "ns_family_order", "ns_muon_dynamics", "ns_shampoo_link"]


def _verdicts() -> dict[str, str]:
    return {i: get_identity(i).derive().verdict for i in IDS}


# (each identity is derived, and must be "proved", once, by tests/test_proofs.py)
@pytest.mark.parametrize("identity_id", IDS)
def test_registered_and_certifies_existing_functions(identity_id):
    identity = get_identity(identity_id)
    assert identity.family == "newton_schulz" and identity.seed.startswith("Baggag & Saad §5")
    for name in identity.certifies:  # the certified functions exist under those names
        module, _, attr = name.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr))


@pytest.mark.parametrize(("coeffs", "name"), [(ns.CUBIC, "cubic"), (ns.QUINTIC, "quintic")])
def test_dynamics_for_other_coefficients(coeffs, name):
    assert nsid.derive_dynamics(coeffs, name).verdict == "proved"


def _bad_step(xp, X, coeffs, _orig=ns.newton_schulz_step):
    c = list(coeffs)  # a wrong second coefficient
    c[1] = c[1] + Fraction(1, 100) if isinstance(c[1], Fraction) else 2 * c[1]
    return _orig(xp, X, tuple(c))


def _no_transpose_back(xp, G, coeffs=ns.MUON, steps=5, *, eps=1e-7, normalize=True,
                       transpose=True, _orig=ns.newton_schulz):
    tall = transpose and G.shape[-2] > G.shape[-1]  # transposed in, never back out
    X = xp.matrix_transpose(G) if tall else G
    return _orig(xp, X, coeffs, steps, eps=eps, normalize=normalize, transpose=False)


def _bad_family(order, _orig=ns.newton_schulz_family):
    c = list(_orig(order))
    c[-1] += Fraction(1, 64)
    return tuple(c)


def _inward_image(coeffs, lo, hi, _orig=ce.image):
    a, b = _orig(coeffs, lo, hi)  # an enclosure rounded inward: no longer certified
    return a + (b - a) / 1000, b - (b - a) / 1000


def _norm_without_sqrt(xp, G, eps=1e-7):
    return G / (xp.sum(G * G, axis=(-2, -1), keepdims=True) + eps)


def _double_direction(xp, G, stats, *args, _orig=sh.shampoo_direction, **kwargs):
    return 2 * _orig(xp, G, stats, *args, **kwargs)


PLANTED = {
    "wrong coefficient in the step": (ns, "newton_schulz_step", _bad_step,
                                      {"ns_step_acts_on_singular_values", "ns_transpose_trick",
                                       "ns_shampoo_link"}),
    "missing transpose handling": (ns, "newton_schulz", _no_transpose_back,
                                   {"ns_transpose_trick", "ns_shampoo_link"}),
    "wrong family coefficient": (ns, "newton_schulz_family", _bad_family, {"ns_family_order"}),
    "wrong cubic": (ns, "CUBIC", (Fraction(3, 2), Fraction(-1, 3)),
                    {"ns_cubic_quadratic_convergence", "ns_family_order", "ns_shampoo_link"}),
    "wrong quintic": (ns, "QUINTIC", (Fraction(15, 8), Fraction(-10, 8), Fraction(3, 7)),
                      {"ns_family_order"}),
    "critical points ignored": (ce, "_critical", lambda coeffs: (), {"ns_muon_dynamics"}),
    "enclosure rounded inward": (ce, "image", _inward_image, {"ns_muon_dynamics"}),
    "normalisation without sqrt": (ns, "frobenius_normalize", _norm_without_sqrt,
                                   {"ns_shampoo_link"}),
    "wrong Shampoo direction": (sh, "shampoo_direction", _double_direction, {"ns_shampoo_link"}),
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_fails(bug, monkeypatch):
    module, attr, replacement, expected = PLANTED[bug]
    targets = sorted(expected | {"ns_step_acts_on_singular_values"})
    monkeypatch.setattr(module, attr, replacement)
    failed = {i for i in targets if get_identity(i).derive().verdict == "failed"}
    assert failed == expected, (bug, failed)


def test_planted_bug_in_scalar_map_fails(monkeypatch):
    orig = ns.odd_polynomial
    monkeypatch.setattr(ns, "odd_polynomial",
                        lambda c, x: orig(c, x) + x**3 / 1000 if len(c) > 1 else orig(c, x))
    assert all(v == "failed" for i, v in _verdicts().items() if i != "ns_transpose_trick")
