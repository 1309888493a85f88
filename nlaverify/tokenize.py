r"""Byte-pair encoding on bytes (Baptista, Stuart & Tran §2.2; Sennrich et al. 2016; the
byte-level variant of GPT-2, Radford et al. 2019).

The vocabulary starts from the 256 bytes; training repeatedly merges the most frequent
adjacent pair of tokens into a new token, :math:`\mathrm{id} = 256 + r` for the
:math:`r`-th merge (its *rank*). Text is first split into chunks by GPT-2's
pre-tokenization pattern (:data:`PATTERN`, letters, numbers and other runs with their
leading space, and whitespace), so that no merge crosses a chunk boundary; each chunk's
UTF-8 bytes are then encoded by applying the merges in rank order: while two adjacent
tokens form a learned pair, the pair of lowest rank is merged (every occurrence, left to
right). Decoding concatenates each token's bytes. So :math:`\operatorname{decode}\circ
\operatorname{encode}` is the identity on every string (and, through
:meth:`BPE.encode_bytes`, on every byte string), each merge shortens a sequence or leaves it
unchanged, and every token's bytes are the concatenation of the two tokens it merges
(``tests/test_tokenize.py`` checks these with hypothesis on arbitrary Unicode). The same
merges loaded into Hugging Face ``tokenizers`` (:meth:`BPE.to_hf`) give the same ids.

Ties in training are broken by the smaller pair of ids (deterministic).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from nlaverify.errors import ArgumentError

__all__ = ["BPE", "PATTERN", "byte_to_unicode", "pretokenize", "train_bpe"]

#: GPT-2's pre-tokenization (Radford et al. 2019; the pattern of Hugging Face's ``ByteLevel``
#: pre-tokenizer and of tiktoken's ``gpt2`` encoding)
PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def pretokenize(text: str) -> list[str]:
    """``text`` split by :data:`PATTERN` into chunks that concatenate back to it."""
    import regex

    return regex.findall(PATTERN, text)


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (the alphabet Hugging Face's
    byte-level BPE works in): printable Latin-1 bytes map to themselves, the others to
    ``chr(256 + k)``."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _merge(seq: list[int], pair: tuple[int, int], new: int) -> list[int]:
    """Every non-overlapping occurrence of ``pair`` in ``seq``, left to right, replaced by
    ``new``."""
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == pair[0] and seq[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


@dataclass
class BPE:
    """A byte-level BPE: ``merges[r]`` is the pair of token ids merged into ``256 + r``."""

    merges: list[tuple[int, int]]
    ranks: dict[tuple[int, int], int] = field(init=False)
    vocab: list[bytes] = field(init=False)

    def __post_init__(self) -> None:
        self.ranks = {}
        self.vocab = [bytes([b]) for b in range(256)]
        for r, (a, b) in enumerate(self.merges):
            n = 256 + r
            if not (0 <= a < n and 0 <= b < n):
                raise ArgumentError(f"BPE: merge {r} = {(a, b)} refers to a token not yet made "
                                    f"(ids below {n} exist)")
            if (a, b) in self.ranks:
                raise ArgumentError(f"BPE: the pair {(a, b)} is merged twice (ranks "
                                    f"{self.ranks[(a, b)]} and {r})")
            self.ranks[(a, b)] = r
            self.vocab.append(self.vocab[a] + self.vocab[b])

    def encode_bytes(self, data: bytes) -> list[int]:
        """The tokens of one chunk of bytes: the merges applied in rank order (module
        docstring), no pre-tokenization."""
        seq = list(data)
        while len(seq) > 1:
            best = min((self.ranks.get(p, len(self.merges)), p) for p in pairwise(seq))
            if best[0] == len(self.merges):
                break
            seq = _merge(seq, best[1], 256 + best[0])
        return seq

    def encode(self, text: str) -> list[int]:
        """The tokens of ``text``: pre-tokenized (:func:`pretokenize`), each chunk's UTF-8
        bytes encoded."""
        return [t for chunk in pretokenize(text) for t in self.encode_bytes(chunk.encode())]

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of ``ids`` (the concatenation of each token's bytes)."""
        out = []
        for i in ids:
            if not 0 <= i < len(self.vocab):
                raise ArgumentError(f"BPE.decode: token id {i} outside the vocabulary "
                                    f"(0 .. {len(self.vocab) - 1})")
            out.append(self.vocab[i])
        return b"".join(out)

    def save(self, path: str) -> None:
        """Write the merges as JSON (``{"merges": [[a, b], ...]}``), atomically."""
        import json
        import os
        import tempfile

        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"merges": [list(p) for p in self.merges]}, fh)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> BPE:
        """The BPE of a file written by :meth:`save` (a malformed one is an
        :class:`~nlaverify.errors.ArgumentError` naming it)."""
        import json

        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
            merges = [(int(a), int(b)) for a, b in doc["merges"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ArgumentError(f"BPE.load: {path!r}: expected a JSON file "
                                f'{{"merges": [[a, b], ...]}}: {exc}') from exc
        return cls(merges)

    def to_hf(self) -> object:
        """The same merges as a Hugging Face ``tokenizers.Tokenizer``: a ``BPE`` model over
        GPT-2's byte alphabet (:func:`byte_to_unicode`) with the ``ByteLevel``
        pre-tokenizer (its regex, no prefix space) and decoder. Needs ``tokenizers``."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        alphabet = byte_to_unicode()

        def spell(t: int) -> str:
            return "".join(alphabet[b] for b in self.vocab[t])

        vocab = {spell(t): t for t in range(len(self.vocab))}
        merges = [(spell(a), spell(b)) for a, b in self.merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        return tok


def train_bpe(text: str | Sequence[str], vocab_size: int) -> BPE:
    """Learn ``vocab_size - 256`` merges on ``text`` (a string or several): its chunks
    (:func:`pretokenize`) counted once each, then repeatedly the most frequent adjacent
    pair within a chunk merged (ties: the smaller pair of ids), until ``vocab_size`` tokens
    or no adjacent pair is left (a corpus too small stops early)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 256:
        raise ArgumentError(f"train_bpe: argument 'vocab_size': expected an integer >= 256 "
                            f"(the bytes), got {vocab_size!r}")
    texts = [text] if isinstance(text, str) else list(text)
    if not any(texts):
        raise ArgumentError("train_bpe: argument 'text': expected a non-empty text to learn "
                            "merges from, got an empty one")
    words = Counter(chunk.encode() for t in texts for chunk in pretokenize(t))
    seqs = [[list(w), c] for w, c in words.items()]
    merges: list[tuple[int, int]] = []
    while 256 + len(merges) < vocab_size:
        counts: Counter[tuple[int, int]] = Counter()
        for seq, c in seqs:
            for p in pairwise(seq):
                counts[p] += c
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        new = 256 + len(merges)
        merges.append(pair)
        for item in seqs:
            if len(item[0]) > 1:
                item[0] = _merge(item[0], pair, new)
    return BPE(merges)
