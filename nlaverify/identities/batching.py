"""The batch axis: every op on a batch of sequences is the op on each sequence.

One identity per op of :data:`nlaverify.ops.registry.OPS`, proved exactly on the SymPy
namespace with the *running* functions: with a leading batch axis of size :math:`B = 3`
(distinct symbols per sequence, distinct token ids, padding in one sequence only),

* per-token ops: :math:`f(X)_b = f(X_b)`; the VJP's cotangents of per-token arguments
  satisfy :math:`\\bar X_b = \\bar X^{(b)}` (the cotangent computed on sequence :math:`b`
  alone) and those of shared parameters
  :math:`\\bar W = \\sum_b \\bar W^{(b)}` (the sum over the batch);
* losses: the batched loss is the weighted mean :math:`L = \\sum_b \\alpha_b L_b` with
  :math:`\\alpha_b = N_b / \\sum_c N_c` for the cross-entropy (:math:`N_b` the non-ignored
  targets of sequence :math:`b`: the mean over the batch's non-ignored tokens) and
  :math:`\\alpha_b = 1` for the squared error; the VJP scales alike,
  :math:`\\bar Z_b = \\alpha_b\\, \\bar Z^{(b)}`.

So the VJP proofs of the ``jacobians`` family, done on one sequence, certify the batched
functions that the graph, the lowered jit and the curvature code run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.identities.core import Identity, Proof, Step, register
from nlaverify.ops.registry import OPS, OpSpec, fixed_routing_mask, with_ignored
from nlaverify.symbolic.document import add_page_extra
from nlaverify.symbolic.exact import is_zero, symbol_array
from nlaverify.symbolic.op_pages import op_page, size_words, static_words
from nlaverify.symbolic.statements import arg_latex
from nlaverify.symbolic.vjp_proof import proof_tokens

#: batch size of the proofs (3: a reduction that used only the first and last sequence,
#: or any two, would still be refuted)
B = 3
#: ops whose output is a scalar reduction over tokens, and how it combines over a batch
#: (the mean cross-entropy by each sequence's share of the targets; the sums by 1)
LOSSES = ("cross_entropy", "cross_entropy_sum", "half_squared_error")


def _batched_args(spec: OpSpec) -> tuple[list[Any], dict[str, Any]]:
    sizes = dict(spec.proof_sizes)
    args: list[Any] = []
    for a in spec.args:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in a.dims)
        if a.kind == "tokens":
            seqs = [(proof_tokens(shape[0], sizes["V"]) + b) % sizes["V"] for b in range(B)]
            if a.ignore is not None:  # padding in sequences 0 and 2, so the N_b differ
                seqs[0] = with_ignored(seqs[0], a.ignore)
                seqs[2][-1] = a.ignore
            args.append(np.stack(seqs))
        elif a.kind == "mask":
            mask = fixed_routing_mask(*shape)
            args.append(get_namespace("sympy").asarray(np.stack([np.roll(mask, b, axis=-1)
                                                                 for b in range(B)])))
        elif a.kind == "fixed" or a.per_sequence:
            args.append(symbol_array(a.name.lower() if len(a.name) == 1 else a.name,
                                     (B, *shape)))
        else:  # a parameter shared by every sequence
            args.append(symbol_array(a.name.lower() if len(a.name) == 1 else a.name, shape))
    static = dict(spec.static)
    for key, sym in spec.proof_static.items():
        static[key] = sympy.Symbol(sym, positive=True)
    return args, static


def _batched(spec: OpSpec, a: Any) -> bool:
    return a.kind != "real" or a.per_sequence


def _obj(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x, dtype=object)


def _weights(spec: OpSpec, args: list[Any]) -> list[Any]:
    if spec.name != "cross_entropy":
        return [sympy.Integer(1)] * B
    k = next(i for i, a in enumerate(spec.args) if a.ignore is not None)
    counts = [int(np.sum(args[k][b] != spec.args[k].ignore)) for b in range(B)]
    return [sympy.Rational(c, sum(counts)) for c in counts]


def prove_batch_axis(spec: OpSpec) -> Proof:
    """Prove the batch identity of ``spec`` (see the module docstring)."""
    xp = get_namespace("sympy")
    xp.reset_shifts()
    args, static = _batched_args(spec)
    per_seq = [[x[b] if _batched(spec, a) else x for a, x in zip(spec.args, args, strict=True)]
               for b in range(B)]
    loss = spec.name in LOSSES
    alpha = _weights(spec, args) if loss else None
    clean = xp.without_shifts  # licensed by softmax_shift_invariance
    out = _obj(clean(spec.forward(xp, *args, **static)))
    outs = [_obj(clean(spec.forward(xp, *s, **static))) for s in per_seq]
    checked = 0

    def zero(diff: Any, what: str) -> str | None:
        nonlocal checked
        for idx, v in np.ndenumerate(_obj(diff)):
            checked += 1
            if not is_zero(v):
                return f"{what}{list(idx)} differs"
        return None

    if loss:
        bad = zero(out - sum(a * o for a, o in zip(alpha, outs, strict=True)), "loss")
    else:
        bad = next((m for b in range(B) if (m := zero(out[b] - outs[b], f"output[{b}]"))),
                   None)
    if bad:
        return Proof("failed", (), bad)
    if spec.differentiable:
        G = symbol_array("g", out.shape)
        cot = [_obj(c) for c in spec.vjp(xp, G, *args, **static)]
        cots = [[_obj(c) for c in spec.vjp(xp, G if loss else G[b], *per_seq[b], **static)]
                for b in range(B)]
        real = [a for a in spec.args if a.kind == "real"]
        for k, a in enumerate(real):
            if _batched(spec, a):
                for b in range(B):
                    scale = alpha[b] if loss else 1
                    bad = bad or zero(_obj(clean(cot[k][b])) - scale * _obj(clean(cots[b][k])),
                                      f"cotangent of {a.name}[{b}]")
            else:
                bad = bad or zero(_obj(clean(cot[k])) - sum(_obj(clean(c[k])) for c in cots),
                                  f"cotangent of {a.name}")
        if bad:
            return Proof("failed", (), bad)
    shared = [a.name for a in spec.args if a.kind == "real" and not _batched(spec, a)]
    steps = [
        Step(f"Exact check at {size_words(spec, spec.proof_sizes, B)}: the per-token "
             "arguments get distinct symbols (and distinct token ids) per sequence"
             + (f"; the shared parameters ({', '.join(f'${arg_latex(s)}$' for s in shared)}) "
                "are one array" if shared else "") + f"{static_words(spec, static)}."),
        Step(f"Run `{spec.qualified_names[0]}`" + (" and its VJP" if spec.differentiable
                                                   else "")
             + " once on the batch and once on each sequence, on the exact namespace "
             "(stability shifts set to 0, licensed by `softmax_shift_invariance`)."),
        Step("Compare entry by entry:" + (f" here $\\alpha = ({', '.join(map(str, alpha))})$, "
                                          "the share of each sequence in the batch's "
                                          "non-ignored targets." if loss and alpha and
                                          spec.name == "cross_entropy" else ""),
             _rule(spec)),
        Step(f"All {checked} differences simplify to exactly $0$."),
    ]
    return Proof("proved", tuple(steps), f"{checked} entries")


def _rule(spec: OpSpec) -> str:
    """The batch identity of ``spec`` in LaTeX (see the module docstring)."""
    if spec.name in LOSSES:
        return r"L(Z) = \sum_b \alpha_b L(Z_b),\quad \bar Z_b = \alpha_b\,\bar Z^{(b)}"
    rule = r"f(X)_b = f(X_b)"
    if spec.differentiable:
        rule += (r",\quad \bar X_b = \bar X^{(b)},\quad \bar W = \textstyle\sum_b "
                 r"\bar W^{(b)}")
    return rule


def _identity(spec: OpSpec) -> Identity:
    add_page_extra(f"{spec.name}_batch", lambda: op_page(spec, "batch", B))
    return Identity(
        id=f"{spec.name}_batch",
        family="batching",
        title=f"`{spec.name}` on a batch of sequences",
        statement=_rule(spec),
        seed=spec.seed + "; Baggag & Saad §3.13.1 (mini-batches)",
        certifies=spec.qualified_names if spec.differentiable else spec.qualified_names[:1],
        derive=lambda: prove_batch_axis(spec),
        tags=("batch", spec.name),
    )


for _spec in OPS.values():
    register(_identity(_spec))
