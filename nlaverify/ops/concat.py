r"""Concatenation along the last axis: the query and key of multi-head latent attention
(DeepSeek-AI 2024, DeepSeek-V2 §2.1.3, eq. 16-17; Hugging Face ``DeepseekV3Attention``'s
``torch.cat((q_pass, q_rot), dim=-1)`` and its key filled as ``[k_nope, k_rot]``) join a
per-head part without positions and a rotated part:

.. math:: \operatorname{cat}(A, B) = [A \mid B] : (\ast, a),\ (\ast, b) \to (\ast, a + b),

linear, so its JVP is itself on the tangents, :math:`\dot Y = [\dot A \mid \dot B]`, and its
VJP is the split of the cotangent, :math:`\bar A = G_{\ldots, :a}`, :math:`\bar B = G_{\ldots,
a:}` (the transpose of a block embedding).
"""

from __future__ import annotations

from typing import Any

from nlaverify.backends.base import Namespace
from nlaverify.ops._tangent import tangents
from nlaverify.ops._validate import check_args
from nlaverify.ops.opspec import Arg, OpSpec

__all__ = ["CONCAT_OPS", "concat_last", "concat_last_jvp", "concat_last_vjp"]


def _dims(op: str, xp: Namespace, A: Any, B: Any) -> dict[str, int]:
    return check_args(op, xp, {"A": (A, ("*", "n", "a")), "B": (B, ("*", "n", "b"))})


def concat_last(xp: Namespace, A: Any, B: Any) -> Any:
    r"""``(*, n, a), (*, n, b) -> (*, n, a + b)``: :math:`Y = [A \mid B]` (DeepSeek-V2
    §2.1.3: :math:`q_{t,i} = [q^C_{t,i}; q^R_{t,i}]`, :math:`k_{t,i} = [k^C_{t,i};
    k^R_t]`)."""
    _dims("concat_last", xp, A, B)
    return xp.concat([A, B], axis=-1)


def concat_last_vjp(xp: Namespace, G: Any, A: Any, B: Any) -> tuple[Any, Any]:
    r"""VJP of :func:`concat_last`: the cotangent split where the inputs were joined,
    :math:`\bar A = G_{\ldots, :a}`, :math:`\bar B = G_{\ldots, a:}`."""
    dims = _dims("concat_last_vjp", xp, A, B)
    check_args("concat_last_vjp", xp, {"G": (G, ("*", "n", "c"))},
               bound={"c": dims["a"] + dims["b"]})
    a = dims["a"]
    return G[..., :a], G[..., a:]


def concat_last_jvp(xp: Namespace, T: tuple[Any, Any], A: Any, B: Any) -> Any:
    r"""JVP of :func:`concat_last`: linear, :math:`\dot Y = [\dot A \mid \dot B]` (a
    ``None`` tangent is a zero block of its argument's shape)."""
    dA, dB = tangents("concat_last_jvp", T, ("dA", "dB"))
    _dims("concat_last_jvp", xp, A, B)
    return concat_last(xp, 0 * A if dA is None else dA, 0 * B if dB is None else dB)


#: to be listed in ``nlaverify.ops.registry.OPS`` (proved by ``nlaverify derive`` as every op)
CONCAT_OPS: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec("concat_last", concat_last, concat_last_vjp,
           (Arg("A", ("h", "n", "a")), Arg("B", ("h", "n", "b"))),
           "DeepSeek-AI 2024 (DeepSeek-V2 §2.1.3, eq. 16-17; Hugging Face DeepseekV3Attention's "
           "torch.cat((q_pass, q_rot), dim=-1))",
           r"\bar A = G_{\ldots,:a},\ \bar B = G_{\ldots,a:}", {"h": 1, "n": 2, "a": 2, "b": 1},
           {"h": (1, 3), "n": (1, 4), "a": (1, 4), "b": (1, 4)}),
)}
