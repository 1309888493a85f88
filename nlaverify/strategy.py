r"""Generation with a decoding strategy (Baptista, Stuart & Tran §6): the next-token
distribution of each step transformed as :mod:`nlaverify.decoding` defines it (Hugging Face's
order: repetition penalty, then temperature, then the filter), then sampled with a seeded
generator; or greedy; or beam search (:mod:`nlaverify.beam`). ``nlaverify generate`` runs
it on a preset's graph.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlaverify import decoding as dec
from nlaverify.errors import ArgumentError, UnknownNameError

__all__ = ["STRATEGIES", "generate_tokens", "step_distribution"]

#: the strategies and the option each one needs (``None``: none)
STRATEGIES: dict[str, str | None] = {"greedy": None, "temperature": None, "top-k": "k",
                                     "top-p": "p", "min-p": "p", "typical": "p", "beam": None}


def step_distribution(z: np.ndarray, previous: Sequence[int], strategy: str, *,
                      temperature: float = 1.0, k: int | None = None, p: float | None = None,
                      repetition_penalty: float = 1.0) -> np.ndarray:
    r"""The distribution one sampling step draws from: the logits ``z`` (one row)
    penalised for the ``previous`` tokens (:math:`\theta` = ``repetition_penalty``; 1 leaves
    them), divided by ``temperature``, then filtered by ``strategy`` (top-:math:`k`, top-:math:`p`,
    min-:math:`p` with :math:`p_{\min} = p`, typical with mass :math:`p`) and renormalised."""
    if strategy not in STRATEGIES or strategy in ("greedy", "beam"):
        raise UnknownNameError(f"step_distribution: argument 'strategy': expected one of "
                               f"temperature, top-k, top-p, min-p, typical, got {strategy!r}")
    need = STRATEGIES[strategy]
    if (need == "k" and k is None) or (need == "p" and p is None):
        raise ArgumentError(f"step_distribution: strategy {strategy!r} needs the option "
                            f"{need!r}")
    z = dec.check_logits("step_distribution", z)
    if repetition_penalty != 1.0:
        z = dec.repetition_penalty(z, previous, repetition_penalty)
    if temperature != 1.0:
        z = dec.scale_logits("step_distribution", z, temperature, "temperature")
    if strategy == "temperature":
        return dec.softmax_rows(z)
    if strategy == "top-k":
        return dec.top_k(z, k)  # type: ignore[arg-type]
    if strategy == "top-p":
        return dec.top_p(z, p)  # type: ignore[arg-type]
    if strategy == "min-p":
        return dec.min_p(z, p)  # type: ignore[arg-type]
    return dec.typical(z, p)  # type: ignore[arg-type]


def generate_tokens(next_logits: Callable[[np.ndarray], np.ndarray], prompt: Sequence[int],
                    max_new_tokens: int, strategy: str = "greedy", *, seed: int = 0,
                    temperature: float = 1.0, k: int | None = None, p: float | None = None,
                    repetition_penalty: float = 1.0, num_beams: int = 4,
                    length_penalty: float = 1.0, eos_token_id: int | None = None
                    ) -> list[int]:
    r"""Extend ``prompt`` by up to ``max_new_tokens`` tokens with ``strategy`` (one of
    :data:`STRATEGIES`); ``next_logits`` maps ``(B, t)`` ids to ``(B, V)`` logits (e.g.
    :func:`nlaverify.generate.graph_next_logits`). Sampling draws each token by inversion
    from one ``numpy.random.default_rng(seed)`` (:func:`nlaverify.decoding.sample`): the same
    seed, the same tokens. Generation stops after ``eos_token_id``.

    Raises:
        UnknownNameError: an unknown strategy. ArgumentError: a missing or bad option, an
            empty prompt, ``max_new_tokens < 1``.
    """
    if strategy not in STRATEGIES:
        raise UnknownNameError(f"generate: unknown strategy {strategy!r}: expected one of "
                               f"{', '.join(STRATEGIES)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 1:
        raise ArgumentError(f"generate: argument 'max_new_tokens': expected an integer >= 1, "
                            f"got {max_new_tokens!r}")
    if len(prompt) == 0:
        raise ArgumentError("generate: argument 'prompt': expected at least one token, got none")
    if strategy == "beam":
        from nlaverify.beam import beam_search

        return beam_search(next_logits, prompt, num_beams, max_new_tokens,
                           length_penalty=length_penalty, eos_token_id=eos_token_id).tokens
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in prompt]
    for _ in range(max_new_tokens):
        z = np.asarray(next_logits(np.asarray([tokens], dtype=np.int64)), np.float64)[0]
        if strategy == "greedy":
            z = dec.check_logits("generate", z)
            if repetition_penalty != 1.0:
                z = dec.repetition_penalty(z, tokens, repetition_penalty)
            nxt = int(np.argmax(z))
        else:
            q = step_distribution(z, tokens, strategy, temperature=temperature, k=k, p=p,
                                  repetition_penalty=repetition_penalty)
            nxt = int(dec.sample(q, rng)[0])
        tokens.append(nxt)
        if eos_token_id is not None and nxt == eos_token_id:
            break
    return tokens


def _cmd_generate(args: argparse.Namespace) -> int:
    """``nlaverify generate``: a preset's (or config's) graph with seeded random weights,
    extended from ``--prompt`` ids with ``--strategy``."""
    from nlaverify import jsonout
    from nlaverify.config import preset
    from nlaverify.generate import graph_next_logits
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params

    cfg: Any = preset(args.preset)
    try:
        prompt = [int(t) for t in args.prompt.split(",") if t.strip()]
    except ValueError as exc:
        raise ArgumentError(f"generate: argument '--prompt': expected comma-separated token "
                            f"ids, got {args.prompt!r}") from exc
    if any(not 0 <= t < cfg.vocab_size for t in prompt):
        raise ArgumentError(f"generate: argument '--prompt': expected ids in [0, "
                            f"{cfg.vocab_size}), got {prompt}")
    if len(prompt) + args.steps > cfg.context:
        raise ArgumentError(f"generate: the prompt's {len(prompt)} tokens plus --steps "
                            f"{args.steps} exceed the context of {cfg.name} ({cfg.context})")
    graph = build_transformer(cfg)
    params = init_params(graph, args.params_seed)
    tokens = generate_tokens(graph_next_logits(graph, params), prompt, args.steps,
                             args.strategy, seed=args.seed, temperature=args.temperature,
                             k=args.k, p=args.p, repetition_penalty=args.repetition_penalty,
                             num_beams=args.beams, length_penalty=args.length_penalty,
                             eos_token_id=args.eos)
    if args.json:
        jsonout.dump({"preset": cfg.name, "strategy": args.strategy, "prompt": prompt,
                      "tokens": tokens, "generated": tokens[len(prompt):]})
        return 0
    print(f"{cfg.name} (random weights, seed {args.params_seed}), {args.strategy}: "
          f"{','.join(map(str, prompt))} -> {','.join(map(str, tokens[len(prompt):]))}")
    return 0
