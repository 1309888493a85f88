"""Beam search (nlaverify.beam): width 1 is greedy, a wide enough beam is the exact
maximiser, and Hugging Face's generate(num_beams=...) picks the same tokens on the same
weights, with and without an end-of-sequence id."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from nlaverify.beam import beam_search
from nlaverify.errors import ArgumentError
from nlaverify.tolerance import tolerance


def _table_model(V: int, seed: int):
    """Next-token logits depending on the last two tokens and the length (a fixed table)."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((V, V, V)) * 2
    P = rng.standard_normal((16, V))

    def next_logits(tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens)
        prev = t[:, -2] if t.shape[1] > 1 else np.zeros(len(t), dtype=int)
        return W[prev, t[:, -1]] + P[t.shape[1]]

    return next_logits


def _logp(next_logits, prompt, seq) -> float:
    total, toks = 0.0, list(prompt)
    for v in seq:
        z = next_logits(np.array([toks]))[0]
        total += z[v] - np.max(z) - np.log(np.sum(np.exp(z - np.max(z))))
        toks.append(v)
    return total


@pytest.mark.parametrize("seed", range(5))
def test_width_one_is_greedy(seed: int) -> None:
    f = _table_model(7, seed)
    prompt = [1, 2]
    got = beam_search(f, prompt, 1, 6).tokens
    greedy = list(prompt)
    for _ in range(6):
        greedy.append(int(np.argmax(f(np.array([greedy]))[0])))
    assert got == greedy


@pytest.mark.parametrize("seed", range(5))
def test_wide_beam_is_the_exact_maximiser(seed: int) -> None:
    """With B = V^(T-1) beams nothing is pruned: the result maximises log p over all V^T
    continuations (kills a score that forgets the running sum or the log-softmax)."""
    V, T = 3, 3
    f = _table_model(V, seed)
    prompt = [0]
    got = beam_search(f, prompt, V ** (T - 1), T)
    scores = {seq: _logp(f, prompt, seq) for seq in itertools.product(range(V), repeat=T)}
    best = max(scores, key=scores.get)
    assert got.tokens == [0, *best]
    # a sum of T log-softmax entries over V: the tolerance model's float64 bound
    assert tolerance("float64", size=V * T, depth=3).compare(got.score, scores[best] / T).ok
    # a narrow beam scores at most the optimum
    assert beam_search(f, prompt, 1, T).score <= got.score


def test_eos_finishes_a_hypothesis_with_its_length_penalty() -> None:
    f = _table_model(5, 3)
    prompt = [1]
    free = beam_search(f, prompt, 3, 5)
    eos = free.tokens[2]  # the second generated token ends a hypothesis
    res = beam_search(f, prompt, 3, 5, eos_token_id=eos)
    for score, toks in res.finished:
        gen = toks[len(prompt):]
        assert gen[-1] == eos or len(gen) == 5
        assert eos not in gen[:-1]
        assert tolerance("float64", size=5 * len(gen), depth=3).compare(
            score, _logp(f, prompt, gen) / len(gen)).ok
    assert [s for s, _ in res.finished] == sorted((s for s, _ in res.finished), reverse=True)


def test_bad_input() -> None:
    f = _table_model(4, 0)
    for kwargs, match in (({"num_beams": 0}, "num_beams"), ({"max_new_tokens": 0},
                                                            "max_new_tokens"),
                          ({"early_stopping": "sometimes"}, "early_stopping"),
                          ({"num_beams": True}, "num_beams")):
        args = {"num_beams": 2, "max_new_tokens": 2, **kwargs}
        with pytest.raises(ArgumentError, match=match):
            beam_search(f, [1], args.pop("num_beams"), args.pop("max_new_tokens"), **args)
    with pytest.raises(ArgumentError, match="prompt"):
        beam_search(f, [], 2, 2)
    with pytest.raises(ArgumentError, match=r"shape \(2, V\)"):
        beam_search(lambda t: np.zeros((1, 4)), [1], 2, 2)
    with pytest.raises(ArgumentError, match="finite"):
        beam_search(lambda t: np.full((2, 4), np.nan), [1], 2, 2)


# --- against Hugging Face's generate on the same weights ----------------------------------


@pytest.fixture(scope="module")
def hf_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params
    from nlaverify.interop import weights as W
    from nlaverify.interop.hf_config import hf_config_dict, load_hf_config

    raw = {"model_type": "llama", "vocab_size": 13, "num_hidden_layers": 2,
           "max_position_embeddings": 16, "intermediate_size": 24, "hidden_size": 16,
           "num_attention_heads": 2, "num_key_value_heads": 1}
    cfg = load_hf_config(raw).config
    graph = build_transformer(cfg)
    params = init_params(graph, seed=0)
    # larger weights: sharper next-token distributions, so near-ties are rare
    params = {k: v * (3.0 if k.endswith("W_U") or k.endswith("W_E") else 1.0)
              for k, v in params.items()}
    hf_cfg = transformers.AutoConfig.for_model(**hf_config_dict(cfg, "llama"))
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float64).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
                           W.params_to_hf(cfg, "llama", params).items()}, strict=True)
    return torch, graph, params, model


def _hf_beam(torch, model, prompt, beams, new, eos, length_penalty=1.0):
    """Every hypothesis generate returns (num_return_sequences = beams), best first."""
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id, gen.bos_token_id = eos, 0, None
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), num_beams=beams, max_new_tokens=new,
                             do_sample=False, length_penalty=length_penalty,
                             early_stopping=False, num_return_sequences=beams)
    seqs = []
    for toks in out.tolist():
        if eos is not None and eos in toks[len(prompt):]:  # padded after the end
            toks = toks[:toks.index(eos, len(prompt)) + 1]
        seqs.append(toks)
    return seqs


@pytest.mark.parametrize("prompt", [[1, 5, 2], [7], [3, 3, 9, 4]])
@pytest.mark.parametrize("beams", [1, 4])
def test_equals_hugging_face_generate(hf_llama, prompt, beams) -> None:
    from nlaverify.generate import graph_next_logits

    torch, graph, params, model = hf_llama
    f = graph_next_logits(graph, params)
    new = 16 - len(prompt)
    ours = beam_search(f, prompt, beams, new)
    assert [t for _, t in ours.finished] == _hf_beam(torch, model, prompt, beams, new, None)
    # end-of-sequence ids that the search meets: the finished hypotheses differ in length
    for eos in dict.fromkeys(ours.tokens[len(prompt):len(prompt) + 4]):
        for lp in (1.0, 0.0, 2.0):
            res = beam_search(f, prompt, beams, new, eos_token_id=eos, length_penalty=lp)
            assert [t for _, t in res.finished] == _hf_beam(torch, model, prompt, beams, new,
                                                            eos, lp), (eos, lp)
