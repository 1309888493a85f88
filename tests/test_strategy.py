"""Generation with a decoding strategy (nlaverify.strategy) and ``nlaverify generate``: the
composition of the processors is Hugging Face's (repetition penalty, temperature, filter),
greedy is beam search of width 1 and the graph's own greedy generation, a seed fixes the
tokens, and bad options are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from nlaverify.cli import main
from nlaverify.config import preset
from nlaverify.errors import ArgumentError, UnknownNameError
from nlaverify.generate import generate_from_graph, graph_next_logits
from nlaverify.graph.build import build_transformer
from nlaverify.graph.run import init_params
from nlaverify.strategy import STRATEGIES, generate_tokens, step_distribution
from nlaverify.tolerance import tolerance


@pytest.fixture(scope="module")
def tiny():
    g = build_transformer(preset("tiny"))
    return g, init_params(g, 0)


@pytest.mark.parametrize("strategy, option", [("temperature", {}), ("top-k", {"k": 3}),
                                              ("top-p", {"p": 0.8}), ("min-p", {"p": 0.2}),
                                              ("typical", {"p": 0.6})])
def test_composition_is_hugging_faces(strategy: str, option: dict) -> None:
    """Repetition penalty 1.3, temperature 0.7, then the filter: Hugging Face's processor
    list on the same float64 logits gives the same distribution (kills a filter that selects
    its tokens before the temperature: top-p's, min-p's and typical's sets depend on it; the
    penalty and the temperature commute, both being sign-preserving scalings)."""
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    z = np.random.default_rng(1).standard_normal(17) * 2
    prev = [0, 3, 3, 5]
    make = {"temperature": lambda: None, "top-k": lambda: lp.TopKLogitsWarper(option["k"]),
            "top-p": lambda: lp.TopPLogitsWarper(option["p"]),
            "min-p": lambda: lp.MinPLogitsWarper(option["p"]),
            "typical": lambda: lp.TypicalLogitsWarper(option["p"])}
    warp = make[strategy]()
    chain = [lp.RepetitionPenaltyLogitsProcessor(1.3), lp.TemperatureLogitsWarper(0.7)]
    chain += [warp] if warp is not None else []
    zt, ids = torch.tensor(z)[None], torch.tensor([prev])
    for proc in chain:
        zt = proc(ids, zt)
    theirs = torch.softmax(zt, -1).numpy()[0]
    ours = step_distribution(z, prev, strategy, temperature=0.7, repetition_penalty=1.3,
                             **option)
    assert np.array_equal(theirs > 0, ours > 0)
    assert tolerance("float64", size=z.size, depth=4).compare(theirs, ours).ok


def test_greedy_is_beam_of_width_one_and_the_graphs_greedy(tiny) -> None:
    g, params = tiny
    f = graph_next_logits(g, params)
    greedy = generate_tokens(f, [1, 2], 6)
    assert greedy == generate_tokens(f, [1, 2], 6, "beam", num_beams=1)
    assert greedy == generate_from_graph(g, params, [1, 2], 6)


def test_seeded_sampling_is_reproducible(tiny) -> None:
    g, params = tiny
    f = graph_next_logits(g, params)
    a = generate_tokens(f, [1], 8, "top-p", p=0.95, seed=3)
    assert a == generate_tokens(f, [1], 8, "top-p", p=0.95, seed=3)
    others = {tuple(generate_tokens(f, [1], 8, "top-p", p=0.95, seed=s)) for s in range(6)}
    assert len(others) > 1  # the seed matters
    eos = a[3]
    stopped = generate_tokens(f, [1], 8, "top-p", p=0.95, seed=3, eos_token_id=eos)
    assert stopped == a[:a.index(eos, 1) + 1]


def test_bad_options() -> None:
    f = lambda t: np.zeros((len(t), 5))  # noqa: E731
    with pytest.raises(UnknownNameError, match="unknown strategy 'nucleus'"):
        generate_tokens(f, [1], 2, "nucleus")
    with pytest.raises(ArgumentError, match="needs the option 'p'"):
        generate_tokens(f, [1], 2, "top-p")
    with pytest.raises(ArgumentError, match="needs the option 'k'"):
        generate_tokens(f, [1], 2, "top-k")
    with pytest.raises(ArgumentError,
                       match=r"top_p: argument 'p': expected a finite number in \(0, 1\]"):
        generate_tokens(f, [1], 2, "top-p", p=1.5)
    with pytest.raises(ArgumentError, match="temperature"):
        generate_tokens(f, [1], 2, "temperature", temperature=-1.0)
    with pytest.raises(ArgumentError, match="max_new_tokens"):
        generate_tokens(f, [1], 0)
    with pytest.raises(ArgumentError, match="prompt"):
        generate_tokens(f, [], 2)
    assert set(STRATEGIES) == {"greedy", "temperature", "top-k", "top-p", "min-p", "typical",
                               "beam"}


def test_cli(capsys) -> None:
    assert main(["generate", "--prompt", "1,2", "--steps", "4", "--strategy", "beam",
                 "--beams", "3"]) == 0
    assert "tiny (random weights, seed 0), beam: 1,2 ->" in capsys.readouterr().out
    for argv, match in ((["--prompt", "1,x"], "comma-separated"),
                        (["--prompt", "1,99"], r"ids in \[0, 11\)"),
                        (["--prompt", "1", "--steps", "40"], "exceed the context")):
        assert main(["generate", *argv]) == 2
        assert match.replace("\\", "") in capsys.readouterr().err.replace("\\", "")
