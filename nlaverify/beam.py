r"""Beam search as Hugging Face's ``generate(num_beams=B)`` defines it (Baptista, Stuart &
Tran §6; the vectorised beam search of transformers >= 4.50, ``GenerationMixin._beam_search``).

A beam is a sequence :math:`y_{1:t}` with the score :math:`s(y) = \sum_{j \le t} \log
p(y_j \mid y_{<j})` (the prompt's tokens excluded). At each step, with :math:`B` running
beams of the current length:

1. every continuation :math:`(y, v)` of a running beam by a token :math:`v` gets
   :math:`s(y) + \log p(v \mid y)`; the :math:`K = \max(2, 1 + |E|)\,B` best are kept
   (:math:`E` the end-of-sequence ids);
2. a candidate *stops* if its token is in :math:`E` or it reaches ``max_length``; the next
   running beams are the :math:`B` best candidates that do not stop;
3. a candidate among the first :math:`B` that stops is *finished*, with the score
   :math:`s(y)/\ell^{\lambda}` (:math:`\ell` the generated length, :math:`\lambda` the
   ``length_penalty``), and the :math:`B` best finished hypotheses are kept;
4. the search ends when every candidate stops (``max_length``), when ``early_stopping``
   is ``True`` and :math:`B` hypotheses are finished, or when the best running score,
   divided by :math:`\ell^{\lambda}` at the current length (``early_stopping=False``;
   at ``max_length`` when ``"never"`` and :math:`\lambda > 0`), cannot beat the worst of
   :math:`B` finished hypotheses.

The best finished hypothesis is returned. Without an end-of-sequence id every hypothesis
has ``max_length`` tokens, and beam search keeps the :math:`B` sequences of largest
log-probability at every step; with :math:`B = 1` it is greedy decoding (proved by
``tests/test_beam.py`` on every step, and checked against ``generate`` on the same
weights). Scores are float64 here (Hugging Face accumulates in float32).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nlaverify.backends import get_namespace
from nlaverify.errors import ArgumentError
from nlaverify.ops.softmaxes import log_softmax

__all__ = ["BeamResult", "beam_search"]

#: Hugging Face's stand-in for minus infinity in beam scores
_NEG = -1.0e9


@dataclass(frozen=True)
class BeamResult:
    """The best hypothesis (``tokens``, prompt included), its length-penalised ``score``,
    and the finished hypotheses in decreasing score (``(score, tokens)``)."""

    tokens: list[int]
    score: float
    finished: list[tuple[float, list[int]]]


def _count(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
        raise ArgumentError(f"beam_search: argument {name!r}: expected an integer >= {lo}, "
                            f"got {value!r}")
    return int(value)


def beam_search(next_logits: Callable[[np.ndarray], np.ndarray], prompt: Sequence[int],
                num_beams: int, max_new_tokens: int, *, length_penalty: float = 1.0,
                eos_token_id: int | Sequence[int] | None = None,
                early_stopping: bool | str = False) -> BeamResult:
    r"""Beam search with ``num_beams`` beams (module docstring; Hugging Face's semantics).

    Args:
        next_logits: ``(B, t)`` int64 sequences of one length to their ``(B, V)``
            next-token logits.
        prompt: the prompt's token ids (at least one).
        num_beams: :math:`B \ge 1`.
        max_new_tokens: tokens to generate at most (:math:`\ge 1`).
        length_penalty: :math:`\lambda` of the finished score :math:`s/\ell^\lambda`.
        eos_token_id: the end-of-sequence id(s), or ``None``.
        early_stopping: ``False`` (Hugging Face's default heuristic), ``True`` or
            ``"never"``.

    Raises:
        ArgumentError: an empty prompt, counts below 1, an unknown ``early_stopping``, or
            logits of the wrong shape or with a non-finite entry.
    """
    B = _count("num_beams", num_beams, 1)
    new = _count("max_new_tokens", max_new_tokens, 1)
    if early_stopping not in (True, False, "never"):
        raise ArgumentError(f"beam_search: argument 'early_stopping': expected True, False or "
                            f"'never', got {early_stopping!r}")
    if len(prompt) == 0:
        raise ArgumentError("beam_search: argument 'prompt': expected at least one token, "
                            "got none")
    eos = set() if eos_token_id is None else (
        {int(eos_token_id)} if isinstance(eos_token_id, int | np.integer)
        else {int(e) for e in eos_token_id})
    n0 = len(prompt)
    max_length = n0 + new
    keep = max(2, 1 + len(eos)) * B
    running = np.tile(np.asarray(prompt, dtype=np.int64), (B, 1))
    run_scores = np.full(B, _NEG)
    run_scores[0] = 0.0
    fin_scores = np.full(B, _NEG)
    fin_tokens: list[list[int]] = [[] for _ in range(B)]
    fin_done = np.zeros(B, dtype=bool)
    improvable = True
    while True:
        cur = running.shape[1]
        z = np.asarray(next_logits(running), dtype=np.float64)
        if z.ndim != 2 or z.shape[0] != B or not np.all(np.isfinite(z)):
            raise ArgumentError(f"beam_search: next_logits: expected finite logits of shape "
                                f"({B}, V), got shape {z.shape}")
        V = z.shape[1]
        total = (log_softmax(get_namespace("numpy"), z) + run_scores[:, None]).reshape(-1)
        # the K best continuations, best first (a stable sort: ties by beam, then token)
        top = np.argsort(-total, kind="stable")[:keep]
        beams, toks, scores = top // V, top % V, total[top]
        cand = np.concatenate([running[beams], toks[:, None]], axis=1)
        stops = np.array([int(t) in eos for t in toks]) | (cur + 1 >= max_length)
        # 2. the next running beams
        order = np.argsort(-(scores + _NEG * stops), kind="stable")[:B]
        running, run_scores = cand[order], (scores + _NEG * stops)[order]
        # 3. finished hypotheses among the first B candidates
        norm = scores / float(cur + 1 - n0) ** length_penalty
        if early_stopping is True and fin_done.all():
            norm = norm + _NEG
        if not improvable:
            norm = norm + _NEG
        just = stops & (np.arange(keep) < B)
        norm = norm + _NEG * ~just
        merged_scores = np.concatenate([fin_scores, norm])
        merged_tokens = fin_tokens + [list(map(int, c)) for c in cand]
        merged_done = np.concatenate([fin_done, just])
        best = np.argsort(-merged_scores, kind="stable")[:B]
        fin_scores, fin_done = merged_scores[best], merged_done[best]
        fin_tokens = [merged_tokens[i] for i in best]
        # 4. the early-stopping heuristic and the end of the loop
        cur += 1
        length = (max_length if early_stopping == "never" and length_penalty > 0 else cur) - n0
        best_running = run_scores[0] / float(length) ** length_penalty
        worst = np.where(fin_done, np.min(fin_scores), _NEG)
        improvable = improvable and bool(np.any(best_running > worst))
        if not improvable or (early_stopping is True and fin_done.all()) or stops.all():
            break
    finished = [(float(s), t) for s, t, d in zip(fin_scores, fin_tokens, fin_done,
                                                  strict=True) if d]
    if not finished:  # pragma: no cover - the last step finishes the first B candidates
        raise ArgumentError("beam_search: no hypothesis finished")
    return BeamResult(finished[0][1], finished[0][0], finished)
