"""Byte-pair encoding (issue 21, item 1): nlaverify.tokenize trained on the shipped passage;
the properties that hold for every input (hypothesis on arbitrary Unicode and bytes), and
the same merges in Hugging Face ``tokenizers`` and in ``tiktoken`` giving the same ids.
"""

from __future__ import annotations

from collections import Counter
from importlib import resources
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlaverify.errors import ArgumentError
from nlaverify.tokenize import BPE, PATTERN, _merge, pretokenize, train_bpe

TEXT = (resources.files("nlaverify") / "data" / "baggag_saad.txt").read_text(encoding="utf-8")
CUT = int(0.9 * len(TEXT))
BPE_512 = train_bpe(TEXT[:CUT], 512)
HELD_OUT = TEXT[CUT:]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_decode_encode_is_the_identity_on_text(s: str) -> None:
    assert "".join(pretokenize(s)) == s  # the pre-tokenization loses nothing
    assert BPE_512.decode(BPE_512.encode(s)) == s.encode()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_decode_encode_is_the_identity_on_bytes(b: bytes) -> None:
    ids = BPE_512.encode_bytes(b)
    assert BPE_512.decode(ids) == b
    assert len(ids) <= len(b)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=30), st.integers(0, 3), st.integers(0, 3))
def test_a_merge_shortens_or_keeps_and_loses_nothing(seq, a, b) -> None:
    out = _merge(seq, (a, b), 99)
    assert len(out) == len(seq) - out.count(99)
    expand = [x for t in out for x in ((a, b) if t == 99 else (t,))]
    assert expand == seq


def test_every_token_is_the_concatenation_of_its_pair() -> None:
    for r, (a, b) in enumerate(BPE_512.merges):
        assert BPE_512.vocab[256 + r] == BPE_512.vocab[a] + BPE_512.vocab[b]
        assert a < 256 + r and b < 256 + r


def test_training_merges_the_most_frequent_pair_first() -> None:
    """An independent recount over the passage's chunks: the first merge is the most frequent
    adjacent byte pair (ties: the smaller pair), and compression of the held-out text
    improves with the vocabulary."""
    counts: Counter[tuple[int, int]] = Counter()
    for chunk in pretokenize(TEXT[:CUT]):
        counts.update(pairwise(chunk.encode()))
    top = min(counts, key=lambda p: (-counts[p], p))
    assert BPE_512.merges[0] == top
    n300 = len(train_bpe(TEXT[:CUT], 300).encode(HELD_OUT))
    n512 = len(BPE_512.encode(HELD_OUT))
    assert n512 < n300 < len(HELD_OUT.encode())


def test_bad_input_is_refused() -> None:
    with pytest.raises(ArgumentError, match="vocab_size"):
        train_bpe("abc", 100)
    with pytest.raises(ArgumentError, match="non-empty text"):
        train_bpe("", 300)
    with pytest.raises(ArgumentError, match="non-empty text"):
        train_bpe(["", ""], 300)
    with pytest.raises(ArgumentError, match="outside the vocabulary"):
        BPE_512.decode([10_000])
    with pytest.raises(ArgumentError, match="not yet made"):
        BPE([(0, 300)])
    with pytest.raises(ArgumentError, match="merged twice"):
        BPE([(97, 98), (97, 98)])


def test_hugging_face_tokenizers_gives_the_same_ids() -> None:
    pytest.importorskip("tokenizers", reason="Hugging Face tokenizers (the [hf] extra)")
    tok = BPE_512.to_hf()
    assert tok.encode(HELD_OUT).ids == BPE_512.encode(HELD_OUT)
    assert tok.decode(BPE_512.encode(HELD_OUT)) == HELD_OUT


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_tokenizers_and_tiktoken_agree_on_drawn_strings(s: str) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="Hugging Face tokenizers")
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken (the [test] extra)")
    assert tokenizers is not None
    ours = BPE_512.encode(s)
    assert BPE_512.to_hf().encode(s).ids == ours
    enc = tiktoken.Encoding("nlaverify-bpe", pat_str=PATTERN,
                            mergeable_ranks={t: i for i, t in enumerate(BPE_512.vocab)},
                            special_tokens={})
    assert enc.encode(s) == ours


def test_tiktoken_gives_the_same_ids_on_held_out_text() -> None:
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken (the [test] extra)")
    enc = tiktoken.Encoding("nlaverify-bpe", pat_str=PATTERN,
                            mergeable_ranks={t: i for i, t in enumerate(BPE_512.vocab)},
                            special_tokens={})
    assert enc.encode(HELD_OUT) == BPE_512.encode(HELD_OUT)


def test_the_command_trains_encodes_and_decodes(tmp_path, capsys) -> None:
    from nlaverify.cli import main

    merges = str(tmp_path / "m.json")
    assert main(["tokenize", "train", "--merges", merges, "--vocab-size", "300"]) == 0
    assert BPE.load(merges).merges == train_bpe(TEXT, 300).merges
    capsys.readouterr()
    assert main(["tokenize", "encode", "--merges", merges, "--input", "attention, é!"]) == 0
    ids = capsys.readouterr().out.strip()
    assert main(["tokenize", "decode", "--merges", merges, "--input", ids]) == 0
    assert capsys.readouterr().out == "attention, é!\n"
    assert main(["tokenize", "decode", "--merges", merges, "--input", "1,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["tokenize", "encode", "--merges", str(tmp_path / "bad.json"), "--input",
                 "a"]) == 2
    assert "expected a JSON file" in capsys.readouterr().err


def test_bpe_corpus_for_training(capsys) -> None:
    """The passage as byte-pair tokens (nlaverify.corpus.load_bpe_corpus): merges learned on
    the training split only, both splits decoding back to the text exactly, and `nlaverify
    train --tokenizer bpe` reporting held-out bits per byte (comparable with characters)."""
    import json

    from nlaverify.cli import main
    from nlaverify.corpus import load_bpe_corpus, load_corpus

    chars = load_corpus()
    c = load_bpe_corpus(300)
    assert c.vocab_size == 300 and c.bpe is not None
    cut = len(c.text) - len(chars.decode(chars.val))
    assert c.decode(c.train) == c.text[:cut] and c.decode(c.val) == c.text[cut:]
    assert len(c.train) < len(chars.train)  # merges shorten the text
    # learned on the training split only: the held-out text leaves no trace in the merges
    assert c.bpe.merges == train_bpe(c.text[:cut], 300).merges
    assert main(["train", "--tokenizer", "bpe", "--bpe-vocab", "300", "--steps", "2",
                 "--optimizer", "sgd", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokenizer"] == "bpe" and out["vocab_size"] == 300
    assert out["heldout_bytes_per_token"] > 1.0 and out["heldout_bits_per_byte"]["sgd"] > 0
    assert main(["train", "--tokenizer", "bpe", "--steps", "1", "--figure", "/tmp/x.svg"]) == 2
    assert "not drawn with --tokenizer bpe" in capsys.readouterr().err
