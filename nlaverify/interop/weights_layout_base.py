r"""The building blocks of :mod:`nlaverify.interop.weights_layout`'s table: one
:class:`_Entry` per Hugging Face tensor and the maps shared by several model types (the
``nn.Linear`` transpose, row splits of fused projections, GPT-NeoX's per-head fused
``query_key_value``, the untied ``lm_head``). Kept apart so that a model type's table may
live in its own module (:mod:`nlaverify.interop.weights_layout_falcon`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig

Shape = tuple[int, ...]


Transform = Callable[[list[np.ndarray], bool], list[np.ndarray]]


def _shape(x: Any) -> Shape:
    return tuple(int(s) for s in np.shape(x))


@dataclass(frozen=True)
class _Entry:
    """HF tensors ``hf`` (canonical state-dict keys, shapes ``hf_shapes``) <-> nlaverify
    parameters ``ours``; ``to_ours`` / ``to_hf`` map the lists (the flag: apply offsets)."""

    hf: tuple[str, ...]
    hf_shapes: tuple[Shape, ...]
    ours: tuple[str, ...]
    to_ours: Transform
    to_hf: Transform


def _copy(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [a[0]]


def _transpose(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
    return [np.ascontiguousarray(a[0].T)]


def _unembed(c: TransformerConfig) -> list[_Entry]:
    if c.tied_embeddings:
        return []  # lm_head.weight: see _TIED
    head = [_Entry(("lm_head.weight",), ((c.vocab_size, c.d_model),), ("unembed.W_U",),
                   _transpose, _transpose)]
    if c.unembed_bias:  # GPT-J, Phi
        head.append(_Entry(("lm_head.bias",), ((c.vocab_size,),), ("unembed.b_U",), _copy,
                           _copy))
    return head


def _split_rows(sizes: tuple[int, ...]) -> tuple[Transform, Transform]:
    """A Linear weight ``(sum(sizes), d_in)`` whose output rows are several projections,
    <-> nlaverify's ``(d_in, size)`` matrices, in order (Mamba's ``in_proj``: x then z;
    ``x_proj``: the rank-``R`` time step, then B, then C)."""
    bounds = np.cumsum([0, *sizes])

    def to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [np.ascontiguousarray(a[0][lo:hi].T) for lo, hi in itertools.pairwise(bounds)]

    def to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.concatenate([x.T for x in a], axis=0))]

    return to_ours, to_hf


def _neox_qkv(H: int, dh: int, weight: bool) -> tuple[Transform, Transform]:
    r"""GPT-NeoX's fused ``query_key_value``: its ``3d`` output rows are ordered ``(heads, 3,
    head_dim)`` (``GPTNeoXAttention.forward``: ``view(..., -1, 3 * head_size)`` then
    ``chunk(3)``): head :math:`h`'s query, key and value, then head :math:`h+1`'s; *not* the
    blocked :math:`[Q | K | V]` of GPT-2's ``c_attn``. Weight ``(3d, d)`` <-> ``W_Q, W_K,
    W_V`` ``(d, d)``; bias ``(3d,)`` <-> ``b_Q, b_K, b_V``."""
    def to_ours(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        rest = a[0].shape[1:]  # (d,) for the weight, () for the bias
        x = a[0].reshape(H, 3, dh, *rest)
        out = [x[:, j].reshape(H * dh, *rest) for j in range(3)]
        return [np.ascontiguousarray(w.T if weight else w) for w in out]

    def to_hf(a: list[np.ndarray], _: bool) -> list[np.ndarray]:
        rows = [(w.T if weight else w).reshape(H, dh, *w.shape[:-1]) for w in a]
        stacked = np.stack(rows, axis=1)  # (H, 3, dh, ...)
        return [np.ascontiguousarray(stacked.reshape(3 * H * dh, *stacked.shape[3:]))]

    return to_ours, to_hf
