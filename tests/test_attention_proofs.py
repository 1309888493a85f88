"""The ``attention`` identities fail when the running code they certify is broken (a planted
error through ``monkeypatch``); that they are proved is checked with the whole catalogue, once
(only the cheapest control is derived here)."""

from __future__ import annotations

import importlib

import pytest

from nlaverify.attention import estimators as es
from nlaverify.identities import attention as attn
from nlaverify.identities.core import get_identity, load_catalogue
from nlaverify.ops import feature_maps as fm
from nlaverify.ops import kernel_attention as ka
from nlaverify.ops import linear_attention as la
from nlaverify.ops import sdpa

NW = importlib.import_module("nlaverify.attention.nadaraya_watson")
CONTROL = "attention_linear_associativity"  # cheap, and untouched by every mutant below


def test_registered_and_certified_names_exist():
    ids = [i for i, t in load_catalogue().items() if t.family == "attention"]
    assert len(ids) == 9
    for i in ids:
        identity = get_identity(i)
        assert identity.seed.startswith("Baggag & Saad §")
        for name in identity.certifies:
            module, _, attr = name.rpartition(".")
            assert callable(getattr(importlib.import_module(module), attr))
    assert get_identity(CONTROL).derive().verdict == "proved"


# --------------------------------------------------------------------------- planted bugs


def _scores_without_root(xp, Q, K, causal=False):
    S = xp.matmul(Q, xp.matrix_transpose(K))  # the 1/sqrt(d) dropped
    if causal:
        S = xp.where(sdpa.causal_mask(xp, Q.shape[-2]), S, -xp.inf)
    return S


def _positive_over_m(xp, X, W, _orig=la.positive_features):
    return _orig(xp, X, W) / xp.const_sqrt(W.shape[-2])  # 1/m instead of 1/sqrt(m)


def _trig_over_m(xp, X, W, b, _orig=la.trig_features):
    return _orig(xp, X, W, b) / xp.const_sqrt(W.shape[-2])  # sqrt(2)/m


def _exponent_without_norm(xp, X, W):
    return xp.matmul(X, xp.matrix_transpose(W))  # exp(-|x|^2/2) dropped


def _exclusive_prefix_sum(xp, X, axis, reverse=False, _orig=ka._prefix_sum):
    return _orig(xp, X, axis, reverse) - X  # sum over j < i instead of j <= i


def _shift_per_key(xp, X, W, per_row, _orig=la._favor_plus_side):
    return _orig(xp, X, W, True)  # one stabiliser per key row: does not cancel


def _nw_sigma_not_squared(xp, q, keys, sigma, _orig=NW.nadaraya_watson_weights):
    return _orig(xp, q, keys, xp.sqrt(xp.asarray([sigma]))[0])  # exp(-|q-k|^2/(2 sigma))


def _elu_without_one(xp, x, _orig=la.elu1):
    return _orig(xp, x) - 1 + 0 * x  # elu, not elu + 1


def _efficient_keys_rowwise(xp, Q, K, V):
    from nlaverify.ops.softmaxes import softmax
    return xp.matmul(softmax(xp, Q), xp.matmul(xp.matrix_transpose(softmax(xp, K)), V))


def _linformer_swapped(xp, Q, K, V, E, F, *, causal=False, _orig=la.linformer_attention):
    return _orig(xp, Q, K, V, F, E, causal=causal)  # E projects the values


PLANTED = {
    "missing 1/sqrt(d) in the scores": (
        sdpa, "attention_scores", _scores_without_root,
        {"attention_nadaraya_watson", "attention_linformer"}),
    "missing d^(1/4) in FAVOR / FAVOR+": (
        la, "_root4", lambda xp, d: 1,
        {"attention_softmax_kernel_is_gaussian", "attention_causal_prefix_sums"}),
    "positive features 1/m instead of 1/sqrt(m)": (
        la, "positive_features", _positive_over_m,
        {"attention_random_features_unbiased", "attention_random_features_mse"}),
    "trig features sqrt(2)/m instead of sqrt(2/m)": (
        la, "trig_features", _trig_over_m,
        {"attention_random_features_unbiased", "attention_random_features_mse",
         "attention_softmax_kernel_is_gaussian"}),
    "exp(-|x|^2/2) dropped": (
        (fm, la), "_positive_exponent", _exponent_without_norm,  # defined in fm, used by both
        {"attention_random_features_unbiased", "attention_random_features_mse",
         "attention_causal_prefix_sums"}),
    "exclusive prefix sum": (
        ka, "_prefix_sum", _exclusive_prefix_sum,
        {"attention_causal_prefix_sums", "attention_elu1_and_efficient"}),
    "FAVOR+ stabiliser per key": (
        la, "_favor_plus_side", _shift_per_key, {"attention_causal_prefix_sums"}),
    "positive MSE constant": (
        es, "positive_mse", lambda xp, x, y, m, _o=es.positive_mse: 2 * _o(xp, x, y, m),
        {"attention_random_features_mse"}),
    "trig MSE without the phase floor": (
        es, "trig_mse", lambda xp, x, y, m, phases=True, softmax=False, _o=es.trig_mse:
        _o(xp, x, y, m, phases=False, softmax=softmax), {"attention_random_features_mse"}),
    "unfixed-QR mean taken as unbiased": (
        es, "unfixed_qr_positive_mean", lambda xp, x, y, m: es.softmax_kernel(xp, x, y),
        {"attention_orthogonal_features"}),
    "Nadaraya-Watson width sigma instead of sigma^2": (
        NW, "nadaraya_watson_weights", _nw_sigma_not_squared, {"attention_nadaraya_watson"}),
    "elu instead of elu + 1": (la, "elu1", _elu_without_one, {"attention_elu1_and_efficient"}),
    "Shen: key softmax over features": (
        la, "efficient_attention", _efficient_keys_rowwise, {"attention_elu1_and_efficient"}),
    "Linformer: E and F swapped": (
        la, "linformer_attention", _linformer_swapped, {"attention_linformer"}),
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_fails(bug, monkeypatch):
    modules, attr, replacement, expected = PLANTED[bug]
    for module in modules if isinstance(modules, tuple) else (modules,):
        monkeypatch.setattr(module, attr, replacement)
    targets = sorted(expected | {CONTROL})
    verdicts = {i: get_identity(i).derive().verdict for i in targets}
    assert {i for i, v in verdicts.items() if v == "failed"} == expected, (bug, verdicts)


def test_expectation_rejects_what_it_cannot_integrate():
    import sympy

    w, b = sympy.symbols("w b", real=True)
    assert attn.expect(sympy.cos(w) * sympy.cos(b), [w], [b]) == 0
    with pytest.raises(ValueError):
        attn.expect(sympy.cos(w**2), [w], [])
    with pytest.raises(ValueError):
        attn.expect(w * sympy.exp(w), [w], [])
