r"""LoRA identities of the ``lowrank`` family (Baggag & Saad §4.2; Hu et al. 2022).

Each derivation runs the ops and the graph builder that the Transformer runs:
:func:`nlaverify.ops.lora.lora_linear` / ``lora_affine`` on the SymPy namespace with
symbolic entries, and :func:`nlaverify.graph.build.build_transformer` with
:func:`~nlaverify.graph.build.parameter_counts` for the trainable counts. The VJPs and JVPs
of the two ops are proved with every other op (family ``jacobians``: ``lora_linear_vjp``,
``lora_affine_vjp`` and their JVPs).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import sympy

from nlaverify.config import LORA_TARGETS, preset
from nlaverify.graph import build as _build
from nlaverify.identities.core import Identity, Proof, Step, guard, qualname, register
from nlaverify.identities.kronecker import XP, _concrete, _equal, _sym, _verdict
from nlaverify.ops import linear as _linear
from nlaverify.ops import lora as _lora

SEED = "Baggag & Saad §4.2"
_s = sympy.Symbol("s", positive=True)

# (d_in, d_out, r): d_in != d_out != r, so a transposed factor is a shape error
_SIZES = ((3, 2, 1), (2, 3, 2))


def _factors(d_in: int, d_out: int, r: int) -> tuple[Any, ...]:
    return (_sym("x", (2, d_in)), _sym("w", (d_in, d_out)), _sym("a", (d_in, r)),
            _sym("b", (r, d_out)), _sym("c", (d_out,)))


def derive_lora_merge() -> Proof:
    def merged(sizes: tuple[int, int, int]) -> bool:
        X, W, A, B, b = _factors(*sizes)
        W_merged = W + _s * np.asarray(XP.matmul(A, B), dtype=object)
        return (_equal(_lora.lora_linear(XP, X, W, A, B, scale=_s),
                       _linear.linear(XP, X, W_merged))
                and _equal(_lora.lora_affine(XP, X, W, b, A, B, scale=_s),
                           _linear.affine(XP, X, W_merged, b)))

    def zero_b(sizes: tuple[int, int, int]) -> bool:
        X, W, A, _, b = _factors(*sizes)
        B0 = np.zeros((sizes[2], sizes[1]), dtype=object) * sympy.Integer(0)
        return (_equal(_lora.lora_linear(XP, X, W, A, B0, scale=_s), _linear.linear(XP, X, W))
                and _equal(_lora.lora_affine(XP, X, W, b, A, B0, scale=_s),
                           _linear.affine(XP, X, W, b)))

    def zero_b_gradient(sizes: tuple[int, int, int]) -> bool:
        # at B = 0 the cotangent of A vanishes; B's does not (the first step moves B only)
        X, W, A, _, _ = _factors(*sizes)
        B0 = np.zeros((sizes[2], sizes[1]), dtype=object) * sympy.Integer(0)
        G = _sym("g", (2, sizes[1]))
        _, _, dA, dB = _lora.lora_linear_vjp(XP, G, X, W, A, B0, scale=_s)
        return _equal(dA, np.zeros_like(dA)) and not _equal(dB, np.zeros_like(dB))

    return _verdict(
        _concrete(r"Merging: the running `lora_linear` (and `lora_affine`) on symbolic $X, W_0, "
                  r"A, B, b$ and scale $s$, minus `linear` (`affine`) with the merged weight "
                  r"$W_0 + sAB$: $X W_0 + s(XA)B - X(W_0 + sAB)$", _SIZES, merged),
        _concrete(r"At initialisation ($B = 0$) the adapted projection is the pre-trained one: "
                  r"`lora_linear` at $B = 0$ minus `linear`", _SIZES, zero_b),
        _concrete(r"and there the VJP `lora_linear_vjp` gives $\bar A = sX^\top GB^\top = 0$ "
                  r"while $\bar B = s(XA)^\top G \ne 0$ (the first update moves $B$ only)",
                  _SIZES, zero_b_gradient),
    )


def derive_lora_rank() -> Proof:
    def minors_vanish(sizes: tuple[int, int, int]) -> bool:
        _, _, A, B, _ = _factors(*sizes)
        M = sympy.Matrix(np.asarray(XP.matmul(A, B), dtype=object).tolist())
        r = sizes[2]
        if r >= min(M.shape):
            return True  # nothing to prove: rank <= min(d_in, d_out) <= r
        return all(sympy.expand(M.extract(list(rows), list(cols)).det()) == 0
                   for rows in combinations(range(M.rows), r + 1)
                   for cols in combinations(range(M.cols), r + 1))

    def full_rank_generic(sizes: tuple[int, int, int]) -> bool:
        _, _, A, B, _ = _factors(*sizes)
        M = sympy.Matrix(np.asarray(XP.matmul(A, B), dtype=object).tolist())
        r = min(sizes[2], *M.shape)
        return any(sympy.expand(M.extract(list(rows), list(cols)).det()) != 0
                   for rows in combinations(range(M.rows), r)
                   for cols in combinations(range(M.cols), r))

    sizes = ((3, 3, 1), (4, 3, 2))
    return _verdict(
        _concrete(r"Every $(r+1)\times(r+1)$ minor of the product $AB$ the op forms (symbolic "
                  r"$A \in \mathbb R^{d_{in}\times r}$, $B \in \mathbb R^{r\times d_{out}}$) "
                  r"expands to $0$ (Cauchy–Binet: each is a sum of products of $(r+1)$-minors "
                  r"of $A$ and $B$, which have only $r$ columns/rows): "
                  r"$\operatorname{rank}(AB) \le r$", sizes, minors_vanish),
        _concrete(r"and some $r\times r$ minor is a nonzero polynomial: for generic factors the "
                  r"rank is exactly $r$", sizes, full_rank_generic),
    )


def _trainable_closed_form(cfg: Any) -> int:
    r"""Per block, :math:`r(d_{in} + d_{out})` for each adapted projection."""
    d, H, Hkv, dh, m, r = (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_mlp,
                           cfg.lora_rank)
    shapes = {"q": [(d, H * dh)], "k": [(d, Hkv * dh)], "v": [(d, Hkv * dh)],
              "o": [(H * dh, d)],
              "mlp": ([(d, m), (d, m), (m, d)] if cfg.mlp in ("swiglu", "geglu")
                      else [(d, m), (m, d)])}
    return cfg.n_blocks * sum(r * (a + b) for t in cfg.lora_targets for a, b in shapes[t])


def derive_lora_counts() -> Proof:
    gpt3 = preset("gpt3-175b").replace(lora_rank=4, lora_targets=("q", "v"))
    cases = [gpt3,
             preset("llama3-405b").replace(lora_rank=16, lora_targets=LORA_TARGETS),
             preset("tiny").replace(lora_rank=2, lora_targets=("k", "o", "mlp")),
             preset("gemma-2b").replace(lora_rank=8, lora_targets=("q", "k", "v", "o"))]

    def counted(cfg: Any) -> bool:
        counts = _build.parameter_counts(_build.build_transformer(cfg))
        base = _build.parameter_counts(_build.build_transformer(cfg.replace(lora_rank=0)))
        return (counts.by_component["lora"] == _trainable_closed_form(cfg)
                and counts.total - counts.by_component["lora"] == base.total)

    named = {f"{c.name} (r = {c.lora_rank})": c for c in cases}
    got = _build.parameter_counts(_build.build_transformer(gpt3)).by_component["lora"]
    shown = f"{got:,}".replace(",", "{,}")
    return _verdict(
        _concrete(r"The graph's `lora` parameters (`parameter_counts` of `build_transformer`) "
                  r"equal $L\sum_{\text{targets}} r(d_{in}+d_{out})$ (SwiGLU/GeGLU MLPs adapt "
                  r"three projections), and the rest of the model is unchanged, for GPT-3 "
                  r"175B ($r = 4$ on $W_q, W_v$), Llama-3 405B ($r = 16$ everywhere, GQA), "
                  r"`tiny` and Gemma-2B", list(named), lambda k: counted(named[k])),
        (got == 96 * 2 * 4 * (12288 + 12288),
         Step(r"GPT-3 175B, $r = 4$ on $W_q, W_v$: $96 \cdot 2 \cdot 4 \cdot (12288 + 12288) = "
              + shown + r"$ trainable parameters, the 18M of Hu et al. 2022 (Table 5), 0.011 % "
              r"of the model")),
    )


def _reg(id_: str, title: str, statement: str, certifies: tuple, derive) -> None:
    register(Identity(id_, "lowrank", title, statement, SEED,
                      tuple(qualname(f) for f in certifies), guard(derive),
                      tags=("closed-form",)))


_reg("lora_merge", "LoRA: merged and unmerged adapters agree; B = 0 leaves the model unchanged",
     r"XW_0 + s(XA)B = X(W_0 + sAB);\quad B = 0 \Rightarrow Y = XW_0,\ \bar A = 0",
     (_lora.lora_linear, _lora.lora_affine, _lora.lora_linear_vjp), derive_lora_merge)
_reg("lora_rank", "LoRA's update has rank at most r",
     r"\operatorname{rank}(AB) \le r,\ \ A \in \mathbb R^{d_{in}\times r},\ "
     r"B \in \mathbb R^{r\times d_{out}}", (_lora.lora_linear,), derive_lora_rank)
_reg("lora_trainable_counts", "LoRA's trainable parameters, counted on the graph",
     r"N_{\mathrm{LoRA}} = L \sum_{\text{targets}} r\,(d_{in} + d_{out});\ "
     r"\text{GPT-3 175B}, r = 4, \{W_q, W_v\}: 18{,}874{,}368",
     (_build.build_transformer, _build.parameter_counts), derive_lora_counts)
