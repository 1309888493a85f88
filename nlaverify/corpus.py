r"""The text of ``nlaverify train`` (:mod:`nlaverify.train`): a plain-text passage of the
seed paper shipped with the package (``nlaverify/data/baggag_saad.txt``, :func:`extract_passage`
of the seed's prose), read as a character-level :class:`Corpus` (every character a token, the
vocabulary the sorted set of its characters, the last ``val_fraction`` held out), its reference
levels (:func:`entropies`: the unigram entropy :math:`H_1` and the bigram conditional entropy
:math:`H_2`), and the windows a step trains on (:func:`window_starts`, :func:`windows`,
:func:`heldout_windows`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from nlaverify.errors import ArgumentError

#: the shipped text, in ``nlaverify/data/``
CORPUS_FILE = "baggag_saad.txt"

_ASCII = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
          "\u2014": "-", "\u2026": "..."}
_LATEX = frozenset("\\_^{}|<>=*")


def extract_passage(text: str) -> str:
    r"""The prose of the seed paper as plain text: per paragraph (one line of the seed),
    footnote markers (superscript digits and the footnote number) removed, typographic
    quotes, dashes and ellipses mapped to ASCII, then only the sentences without LaTeX
    (``\ _ ^ { } | < > = *``), URLs or other non-ASCII characters kept; paragraphs of at
    least 80 characters, separated by blank lines. Applied to the seed
    ``baggag-saad-nla-of-llms.txt`` it gives the shipped ``baggag_saad.txt`` (62 kB)."""
    out = []
    for line in text.split("\n"):
        line = re.sub(r"[\u00b9\u00b2\u00b3\u2070-\u2079]+\s*\d*\s*", " ", line)
        for k, v in _ASCII.items():
            line = line.replace(k, v)
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z(\[])", line.strip())
        kept = [s for s in sentences if not set(s) & _LATEX and "http" not in s and s.isascii()]
        para = re.sub(r"\s+", " ", " ".join(kept)).strip()
        if len(para) >= 80:
            out.append(para)
    return "\n\n".join(out) + "\n"


@dataclass(frozen=True)
class Corpus:
    """A tokenized text: ``vocab[i]`` is the text of token id ``i`` (a character; with a
    byte-pair encoding, :attr:`bpe`, its bytes read as Latin-1); ``train`` and ``val`` are the
    id arrays of the training and held-out splits."""

    text: str
    vocab: str | tuple[str, ...]
    train: np.ndarray
    val: np.ndarray
    #: the byte-pair encoding of :func:`load_bpe_corpus` (``None``: characters)
    bpe: Any = None

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> np.ndarray:
        """The token ids of ``text`` (every character must be in :attr:`vocab`; any text
        with a byte-pair encoding)."""
        if self.bpe is not None:
            return np.asarray(self.bpe.encode(text), dtype=np.int64)
        index = {c: i for i, c in enumerate(self.vocab)}
        missing = sorted(set(text) - set(index))
        if missing:
            raise ArgumentError(f"encode: characters {missing[:5]!r} are not in the vocabulary")
        return np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids: Any) -> str:
        if self.bpe is not None:
            return self.bpe.decode(np.asarray(ids).ravel().tolist()).decode(
                "utf-8", errors="replace")
        return "".join(self.vocab[int(i)] for i in np.asarray(ids).ravel())


def load_corpus(text: str | None = None, val_fraction: float = 0.1) -> Corpus:
    """The shipped passage (or ``text``) as a :class:`Corpus`; the last ``val_fraction``
    of the characters is the held-out split."""
    if not 0 < val_fraction < 1:
        raise ArgumentError(f"load_corpus: val_fraction: expected a number in (0, 1), got "
                            f"{val_fraction!r}")
    if text is None:
        text = (resources.files("nlaverify") / "data" / CORPUS_FILE).read_text(encoding="utf-8")
    vocab = "".join(sorted(set(text)))
    ids = np.fromiter((vocab.index(c) for c in text), dtype=np.int64, count=len(text))
    cut = len(ids) - math.ceil(val_fraction * len(ids))
    return Corpus(text, vocab, ids[:cut], ids[cut:])


def load_bpe_corpus(vocab_size: int = 384, text: str | None = None,
                    val_fraction: float = 0.1) -> Corpus:
    r"""The shipped passage (or ``text``) tokenized by byte-pair encoding
    (:func:`nlaverify.tokenize.train_bpe`, Baptista, Stuart & Tran §2.2): the merges are
    learned on the training split only (the last ``val_fraction`` of the characters held
    out, as :func:`load_corpus` splits), and both splits are encoded with them; the
    vocabulary is the 256 bytes and ``vocab_size - 256`` merged tokens."""
    from nlaverify.tokenize import train_bpe

    if not 0 < val_fraction < 1:
        raise ArgumentError(f"load_bpe_corpus: val_fraction: expected a number in (0, 1), got "
                            f"{val_fraction!r}")
    if text is None:
        text = (resources.files("nlaverify") / "data" / CORPUS_FILE).read_text(encoding="utf-8")
    cut = len(text) - math.ceil(val_fraction * len(text))
    bpe = train_bpe(text[:cut], vocab_size)
    vocab = tuple(t.decode("latin-1") for t in bpe.vocab)
    return Corpus(text, vocab, np.asarray(bpe.encode(text[:cut]), dtype=np.int64),
                  np.asarray(bpe.encode(text[cut:]), dtype=np.int64), bpe)


def entropies(ids: np.ndarray, vocab_size: int) -> tuple[float, float]:
    r"""The unigram entropy :math:`H_1 = -\sum_c p_c \log p_c` and the bigram conditional
    entropy :math:`H_2 = -\sum_{a,c} p_{ac}\log p_{c\mid a}` of ``ids``, in nats: the
    cross-entropy of the best context-free and of the best one-character-context predictor
    fitted to these very ids (a model reaching :math:`H_1` has learned the frequencies)."""
    ids = np.asarray(ids)
    p = np.bincount(ids, minlength=vocab_size) / len(ids)
    h1 = float(-np.sum(p[p > 0] * np.log(p[p > 0])))
    joint = np.zeros((vocab_size, vocab_size))
    np.add.at(joint, (ids[:-1], ids[1:]), 1.0)
    joint /= joint.sum()
    cond = joint / np.maximum(joint.sum(axis=1, keepdims=True), 1e-300)
    nz = joint > 0
    return h1, float(-np.sum(joint[nz] * np.log(cond[nz])))


def window_starts(n_ids: int, steps: int, batch: int, seq_len: int, seed: int) -> np.ndarray:
    """Seeded window offsets ``(steps, batch)``, uniform on ``[0, n_ids - seq_len - 1]``
    (each window holds ``seq_len + 1`` ids: the tokens and, shifted by one, the targets)."""
    if n_ids < seq_len + 1:
        raise ArgumentError(f"window_starts: a split of {n_ids} characters is shorter than a "
                            f"window of seq_len + 1 = {seq_len + 1}")
    rng = np.random.default_rng([seed, 0x7E47])  # a stream apart from the parameters' seed
    return rng.integers(0, n_ids - seq_len, size=(steps, batch), dtype=np.int64)


def windows(ids: np.ndarray, starts: np.ndarray, seq_len: int) -> dict[str, np.ndarray]:
    """``tokens`` ``ids[s : s + n]`` and ``targets`` ``ids[s + 1 : s + n + 1]`` for each
    start ``s`` (shape ``starts.shape + (n,)``)."""
    idx = np.asarray(starts)[..., None] + np.arange(seq_len)
    return {"tokens": ids[idx], "targets": ids[idx + 1]}


def heldout_windows(ids: np.ndarray, seq_len: int) -> dict[str, np.ndarray]:
    """Every non-overlapping window of ``ids`` (the held-out batch)."""
    count = (len(ids) - 1) // seq_len
    if count < 1:
        raise ArgumentError(f"heldout_windows: a split of {len(ids)} characters holds no "
                            f"window of seq_len + 1 = {seq_len + 1}")
    return windows(ids, np.arange(count) * seq_len, seq_len)


__all__ = ["CORPUS_FILE", "Corpus", "entropies", "extract_passage", "heldout_windows",
           "load_corpus", "window_starts", "windows"]
