r"""Direct logit attribution through the final norm with its scale frozen.

In a pre-LN model the stream entering the final norm is the sum of the stream entry and
every writer, :math:`x = x_0 + \sum_k a^{(k)}` (proved as ``residual_stream_additive``).
With the norm's per-row scale :math:`\sigma` *frozen* at its value on the whole stream,
the norm is affine in its input, so the logits split exactly into one term per component
plus the norm's bias (Elhage et al. 2021; proved as ``dla_frozen_scale``):

.. math:: z = \sum_k \Bigl(\gamma\odot\frac{a^{(k)}P}{\sigma}\Bigr)W_U + \beta W_U,\qquad
   \sigma = \sqrt{\tfrac1d\lVert xP\rVert^2 + \epsilon},

with :math:`P = I - \tfrac1d\mathbf 1\mathbf 1^\top` for LayerNorm and :math:`P = I`,
:math:`\beta = 0` for RMSNorm (:math:`W_U = W_E^\top` when tied; without a final norm
:math:`\gamma = 1, \sigma = 1`). The split is exact only with the frozen scale: each
component normalised by a scale of its own does not sum to the logits: its error is
exactly :math:`\sum_k (\gamma\odot a^{(k)}P)(1/\sigma_k - 1/\sigma)W_U`
(:attr:`Attribution.unfrozen_error`).

Seed: Baggag & Saad §3.15-3.16 (the unembedding as a fixed coordinate system); Elhage et
al. 2021.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.graph.compare import accumulation_length, node_depths, node_tolerance
from nlaverify.transform.verify import InvarianceRow, _values
from nlaverify.transform.weights import _checked, _writers, center_last


def frozen_scale(x: Any, eps: Any, centered: bool) -> Any:
    r"""The final norm's per-row scale on the whole stream, :math:`\sigma =
    \sqrt{\tfrac1d\lVert xP\rVert^2 + \epsilon}` (:math:`P` the centering when
    ``centered``), shape ``(..., 1)``; plain array operations (SymPy object arrays too)."""
    c = center_last(x) if centered else x
    mean_square = np.sum(c * c, axis=-1, keepdims=True) / x.shape[-1] + eps
    if mean_square.dtype == object:  # the exact namespace's proofs
        import sympy

        return np.vectorize(sympy.sqrt, otypes=[object])(mean_square)
    return np.sqrt(mean_square)


def attribute(part: Any, gamma: Any, sigma: Any, centered: bool) -> Any:
    r"""One component's input to the unembedding with the scale frozen,
    :math:`\gamma\odot a P/\sigma`."""
    return gamma * (center_last(part) if centered else part) / sigma


@dataclass(frozen=True)
class Attribution:
    """Per-component logits (``{component: (n, V)}``, the norm's bias as ``"bias"``, the
    unembedding's bias as ``"unembed.b_U"``) and
    the check that they sum to the graph's logits."""

    parts: dict[str, np.ndarray]
    check: InvarianceRow
    #: each component normalised by its own scale :math:`\sigma_k` instead (the common
    #: mistake): its sum's error against the logits, exactly
    #: :math:`\sum_k (\gamma\odot a^{(k)}P)(1/\sigma_k - 1/\sigma)W_U`, ``(n, V)``
    unfrozen_error: np.ndarray | None = None

    @property
    def unfrozen_relative_error(self) -> float:
        """The normwise size of :attr:`unfrozen_error` relative to the logits."""
        if self.unfrozen_error is None:
            return 0.0
        total = sum(self.parts.values())
        return float(np.linalg.norm(self.unfrozen_error) / np.linalg.norm(total))


def direct_logit_attribution(config: TransformerConfig, params: dict[str, Any], *,
                             data: dict[str, Any] | None = None, seed: int = 0,
                             n: int | None = None) -> Attribution:
    r"""The logits split into the stream entry ``x0``, every writer (by node) and the final
    norm's bias, with the norm's scale frozen (see the module docstring); the sum is
    compared with the graph's ``logits`` node by
    :func:`~nlaverify.graph.compare.node_tolerance` at its depth plus one (the sum).

    Args:
        data: tokens and targets (default :func:`~nlaverify.graph.run.sample_data`).
    """
    from nlaverify.graph.run import sample_data

    g, p = _checked(config, params, "direct_logit_attribution")
    if getattr(config, "final_softcap", None) is not None:
        from nlaverify.errors import ArgumentError

        raise ArgumentError("direct_logit_attribution: the logits are soft-capped "
                            f"(final_softcap={config.final_softcap}): c tanh(z/c) does not "
                            "split over the components")
    n = min(config.context, 8) if n is None else n
    data = sample_data(config.vocab_size, n, seed) if data is None else data
    _, values = _values(config, p, data)
    W_U = p["embed.W_E"].T if config.tied_embeddings else p["unembed.W_U"]
    stream = [v for v in g if g.nodes[v].get("op") == "residual_add"][-1]
    centered = config.final_norm and config.norm == "layernorm"
    components = {"x0": values["x0"], **{w: values[w] for w in _writers(g)}}
    if config.final_norm:
        # a norm without a learned gain (OLMo) multiplies by 1
        gamma = p.get("final_norm.gamma", np.ones(config.d_model))
        sigma = frozen_scale(np.asarray(values[stream]), config.norm_eps, centered)
    else:
        gamma, sigma = np.ones(config.d_model), np.ones((*np.shape(values[stream])[:-1], 1))
    parts = {k: attribute(np.asarray(a), gamma, sigma, centered) @ W_U
             for k, a in components.items()}
    if centered and "final_norm.beta" in p:  # a LayerNorm without a bias adds none
        parts["bias"] = np.broadcast_to(p["final_norm.beta"] @ W_U, parts["x0"].shape)
    if getattr(config, "unembed_bias", False):  # the unembedding's own bias b_U
        parts["unembed.b_U"] = np.broadcast_to(p["unembed.b_U"], parts["x0"].shape)
    total = sum(parts.values())
    k = accumulation_length(g, int(np.shape(data["tokens"])[-1]))
    tol = node_tolerance("float64", k, node_depths(g)["logits"] + 1, values["logits"])
    c = tol.compare(total, values["logits"])
    error = None
    if config.final_norm:  # the split with each component's own scale, and its exact error
        own = {key: attribute(np.asarray(a), gamma,
                              frozen_scale(np.asarray(a), config.norm_eps, centered), centered)
               @ W_U for key, a in components.items()}
        error = sum(own.values()) - sum(v for key, v in parts.items()
                                        if key not in ("bias", "unembed.b_U"))
    return Attribution(parts, InvarianceRow("logits", g.nodes["logits"]["op"], "equal",
                                            c.normwise, tol.rtol), error)
