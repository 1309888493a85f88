r"""Train the graph-lowered Transformer on next-character prediction (Baggag & Saad §2.4,
§3.13.1, §5.5).

The text is a plain-text passage of the seed paper shipped with the package
(``nlaverify/data/baggag_saad.txt``, :func:`extract_passage` of the seed's prose: every
sentence free of LaTeX, typographic quotes and dashes mapped to ASCII). Every character of
it is a token: the vocabulary is the sorted set of its characters (76), and the model is the
preset with its vocabulary *resized to fit* (:func:`char_config`:
``preset(name).replace(vocab_size=len(vocab))``), so no character is mapped to an unknown
id. The last ``val_fraction`` of the text is held out.

A step draws ``batch`` windows of ``seq_len + 1`` characters at seeded random offsets of
the training split, tokens :math:`x_{1..n}` and targets :math:`x_{2..n+1}`, and minimises
the mean next-character cross-entropy

.. math:: L(\theta) = -\frac{1}{Bn}\sum_{b=1}^{B}\sum_{i=1}^{n}
          \log \operatorname{softmax}(z_{b,i}(\theta))_{x_{b,i+1}}

with one ``jax.jit`` of the whole step: the graph's forward and its hand-derived VJPs
(:func:`nlaverify.graph.core.evaluate` and :func:`~nlaverify.graph.core.backprop` on the
JAX namespace, what :func:`nlaverify.graph.lower.lower` traces) followed by an update rule of
:mod:`nlaverify.optim.rules`. The held-out loss is the mean over every non-overlapping
window of the held-out split. Reference levels of a character model: the uniform
:math:`\log V`, the unigram entropy :math:`H_1` and the bigram conditional entropy
:math:`H_2` of the training split (:func:`entropies`). The text, its splits and windows are
in :mod:`nlaverify.corpus` (re-exported here).
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig, preset
from nlaverify.corpus import (  # noqa: F401  (re-exported)
    CORPUS_FILE,
    Corpus,
    entropies,
    extract_passage,
    heldout_windows,
    load_corpus,
    window_starts,
    windows,
)
from nlaverify.errors import ArgumentError, UnknownNameError

#: the optimizers of ``nlaverify train``
OPTIMIZERS = ("sgd", "adamw", "muon")
#: default learning rates on the ``tiny`` preset (batch 16 x 16 characters, seed 0), from a
#: small sweep, held-out loss after 300 steps (start 4.69, unigram entropy 3.09): sgd 0.3 ->
#: 2.95, 1 -> 2.73, 3 diverges; adamw 3e-3 -> 2.85, 1e-2 -> 2.63, 3e-2 -> 2.57; muon (AdamW
#: fallback 3e-2) 2e-2 -> 2.54, 5e-2 -> 2.59. ``docs/figures/training.svg``: 500 steps.
DEFAULT_LR: dict[str, float] = {"sgd": 1.0, "adamw": 3e-2, "muon": 2e-2}


def char_config(name: str, vocab_size: int) -> TransformerConfig:
    """Preset ``name`` with ``vocab_size`` set to the character vocabulary."""
    return preset(name).replace(vocab_size=vocab_size, name=f"{name}-chars")


def make_rule(optimizer: str, lr: float | None = None) -> Any:
    r"""The update rule ``optimizer`` of :mod:`nlaverify.optim.rules` at learning rate ``lr``
    (default :data:`DEFAULT_LR`), every other hyperparameter at the rule's default (AdamW:
    :math:`\beta = (0.9, 0.999)`, :math:`\epsilon = 10^{-8}`, weight decay :math:`10^{-4}`;
    Muon: momentum 0.95, Nesterov, five Newton–Schulz steps with Muon's coefficients, optax's
    shape scale). Muon orthogonalises the hidden matrices only; the embedding, positions and
    unembedding (and every vector) go to its AdamW fallback at AdamW's default rate, as in
    Jordan et al.'s recipe."""
    from nlaverify.optim import rules

    if optimizer not in OPTIMIZERS:
        raise UnknownNameError(f"train: unknown optimizer {optimizer!r}: expected one of "
                               f"{', '.join(OPTIMIZERS)}")
    eta = DEFAULT_LR[optimizer] if lr is None else lr
    if isinstance(eta, bool) or not isinstance(eta, int | float) or not (
            math.isfinite(eta) and eta > 0):
        raise ArgumentError(f"train: lr: expected a finite positive number, got {eta!r}")
    if optimizer == "sgd":
        return rules.sgd(eta)
    if optimizer == "adamw":
        return rules.adamw(eta)
    return rules.muon(eta, adam=rules.adamw(DEFAULT_LR["adamw"]), is_matrix=_hidden_matrix)


def _hidden_matrix(name: str, shape: tuple[int, ...]) -> bool:
    return len(shape) == 2 and not name.startswith(("embed.", "pos.", "unembed."))


@dataclass
class TrainResult:
    """One training run: the batch loss before each step (``losses[t]``, at the parameters
    after ``t`` updates), the held-out loss at ``val_steps``, the final parameters and the
    timings (``compile_s``: the first step, compilation included; ``train_s``: the other
    steps, held-out evaluations excluded; ``val_times``: the wall-clock time of each held-out
    loss since the start, everything included)."""

    optimizer: str
    lr: float
    config: TransformerConfig
    steps: int
    batch: int
    seq_len: int
    seed: int
    losses: np.ndarray
    val_steps: np.ndarray
    val_losses: np.ndarray
    params: dict[str, np.ndarray] = field(repr=False)
    compile_s: float = 0.0
    train_s: float = 0.0
    val_times: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.train_s / max(1, self.steps - 1)

    def as_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "lr": self.lr, "config": self.config.as_dict(),
                "steps": self.steps, "batch": self.batch, "seq_len": self.seq_len,
                "seed": self.seed, "losses": self.losses.tolist(),
                "val_steps": self.val_steps.tolist(), "val_losses": self.val_losses.tolist(),
                "compile_s": self.compile_s, "train_s": self.train_s,
                "ms_per_step": self.ms_per_step}


@functools.lru_cache(maxsize=8)
def _graph(config: TransformerConfig) -> Any:
    from nlaverify.graph.build import build_transformer

    return build_transformer(config)


@functools.lru_cache(maxsize=8)
def _heldout_function(config: TransformerConfig) -> Any:
    """The jitted loss of the graph (forward only), one per config."""
    import jax

    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import evaluate

    graph, xp = _graph(config), get_namespace("jax")

    def heldout_loss(params: dict[str, Any], data: dict[str, Any]) -> Any:
        return evaluate(graph, xp, {**data, **params}, outputs=["loss"])["loss"]

    return jax.jit(heldout_loss)


@functools.lru_cache(maxsize=16)
def _step_function(config: TransformerConfig, optimizer: str, lr: float,
                   frozen: frozenset[str] = frozenset()) -> Any:
    """The jitted training step ``(params, frozen_params, state, data) -> (params, state,
    loss)`` and the rule, one per (config, optimizer, lr, frozen names): a second run reuses
    the compilation. The ``frozen`` parameters enter the forward pass but get no update
    (fine-tuning: LoRA freezes everything but the adapters)."""
    import jax

    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import backprop, evaluate
    from nlaverify.optim.rules import apply_updates

    graph, xp, rule = _graph(config), get_namespace("jax"), make_rule(optimizer, lr)

    def step(params: dict[str, Any], fixed: dict[str, Any], state: Any,
             data: dict[str, Any]) -> Any:
        values = evaluate(graph, xp, {**data, **fixed, **params})
        cot = backprop(graph, xp, values, "loss")  # the ops' hand-derived VJPs
        grads = {p: cot[p] if p in cot else xp.zeros_like(v) for p, v in params.items()}
        updates, state = rule.update(xp, grads, state, params)
        return apply_updates(xp, params, updates), state, values["loss"]

    return jax.jit(step), rule


#: the bytes one activation entry costs in a training step: float64 values, their cotangents
#: and XLA's temporaries of the fused step (a factor 3 over the values)
BYTES_PER_ACTIVATION = 3 * 8


def step_memory(config: TransformerConfig, seq_len: int, batch: int) -> int:
    r"""An estimate of the activation memory of one training step, in bytes:

    .. math:: B \Bigl(n\,(d + 2V) + L\bigl(n\,(10 d + 3 d_{\mathrm{mlp}}) + 2 h n^2\bigr)\Bigr)
              \times 24,

    the embedding and logits (and their softmax), per block the residual stream, norms,
    :math:`Q, K, V`, attention output and projections (:math:`\approx 10 d` per token), the
    MLP's hidden layers (:math:`3 d_{\mathrm{mlp}}`) and the scores and probabilities of
    every head (:math:`2 h n^2`), times :data:`BYTES_PER_ACTIVATION` (Baggag & Saad §3: the
    shapes of the forward pass)."""
    d, L, h = config.d_model, config.n_blocks, config.n_heads
    per_seq = seq_len * (d + 2 * config.vocab_size) + L * (
        seq_len * (10 * d + 3 * config.d_mlp) + 2 * h * seq_len**2)
    return batch * per_seq * BYTES_PER_ACTIVATION


def check_step_memory(config: TransformerConfig, seq_len: int, batch: int) -> None:
    """Refuse, before allocating, a step whose activations (:func:`step_memory`) would take
    more than half of this machine's memory (``train --batch 100000000`` went to the OOM
    killer at 18.5 GB)."""
    import os

    need = step_memory(config, seq_len, batch)
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf here
        return
    if need > total // 2:
        raise ArgumentError(f"train: batch={batch} x seq_len={seq_len} needs about "
                            f"{need / 2**30:.1f} GiB of activations per step, more than half "
                            f"of this machine's {total / 2**30:.1f} GiB: use a smaller --batch "
                            "or --seq-len")


def train(config: TransformerConfig | str, optimizer: str, steps: int, *,
          seq_len: int | None = None, batch: int = 16, lr: float | None = None, seed: int = 0,
          eval_every: int | None = None, corpus: Corpus | None = None,
          progress: bool = False, init: Any = None,
          trainable: Any = None) -> TrainResult:
    r"""Train ``config`` (a config, or a preset name resized by :func:`char_config`) with
    ``optimizer`` for ``steps`` steps of ``batch`` random windows of ``seq_len`` characters
    (default: the context) of ``corpus`` (default: :func:`load_corpus`).

    Parameters start at :func:`nlaverify.graph.run.init_params` (``seed``); windows come from
    :func:`window_starts` (``seed``). The held-out loss is taken every ``eval_every`` steps
    (default ``steps // 20``, at least 1) and after the last. ``progress``: a tqdm bar on
    stderr. Fine-tuning (:mod:`nlaverify.finetune`): ``init`` gives the starting parameters
    (a mapping covering every parameter node) and ``trainable`` the names that are updated
    (default: all); the others are frozen, and ``TrainResult.params`` holds them all.

    Raises:
        UnknownNameError: an unknown optimizer or preset.
        ArgumentError: ``steps`` or ``batch`` < 1, ``seq_len`` outside ``[1, context]``, a
            non-positive ``lr``, a config whose vocabulary is smaller than the corpus's.
    """
    import jax

    from nlaverify.backends import get_namespace
    from nlaverify.graph.core import check_token_values
    from nlaverify.graph.run import check_run_size, init_params

    corpus = load_corpus() if corpus is None else corpus
    if isinstance(config, str):
        config = char_config(config, corpus.vocab_size)
    for name, v in (("steps", steps), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArgumentError(f"train: {name}: expected a positive integer, got {v!r}")
    if config.vocab_size < corpus.vocab_size:
        raise ArgumentError(f"train: config {config.name!r} has vocab_size={config.vocab_size}, "
                            f"expected at least the {corpus.vocab_size} characters of the text "
                            "(use char_config or config.replace(vocab_size=...))")
    seq_len = config.context if seq_len is None else seq_len
    check_run_size(config, seq_len, batch)
    check_step_memory(config, seq_len, batch)
    make_rule(optimizer, lr)  # checks the name and the rate before any compilation
    lr = float(DEFAULT_LR[optimizer] if lr is None else lr)
    eval_every = max(1, steps // 20) if eval_every is None else eval_every
    if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 1:
        raise ArgumentError(f"train: eval_every: expected a positive integer, got {eval_every!r}")

    graph, val_loss = _graph(config), _heldout_function(config)
    start = init_params(graph, seed) if init is None else _check_init(graph, init)
    if isinstance(trainable, (str, bytes)) or (trainable is not None
                                               and not hasattr(trainable, "__iter__")):
        raise ArgumentError(f"train: trainable: expected a collection of parameter node "
                            f"names (or None for all), got {type(trainable).__name__} "
                            f"{trainable!r}")
    names = set(start) if trainable is None else set(trainable)
    if not names or names - set(start):
        bad = sorted(names - set(start))[:1] or ["(none)"]
        raise ArgumentError(f"train: trainable: expected a non-empty set of parameter nodes, "
                            f"got {bad[0]!r}")
    step, rule = _step_function(config, optimizer, lr, frozenset(set(start) - names))
    xp = get_namespace("jax")
    params = {k: xp.asarray(v) for k, v in start.items() if k in names}
    fixed = {k: xp.asarray(v) for k, v in start.items() if k not in names}
    state = rule.init(xp, params)
    starts = window_starts(len(corpus.train), steps, batch, seq_len, seed)
    held = {k: xp.asarray(v) for k, v in heldout_windows(corpus.val, seq_len).items()}
    check_token_values(graph, held)  # ids are values, invisible to the trace
    check_token_values(graph, windows(corpus.train, starts[:1], seq_len))

    losses: list[Any] = []
    val_steps, val_losses, val_times = [], [], []
    compile_s, eval_s, t0 = 0.0, 0.0, time.perf_counter()

    def evaluate_heldout(t: int) -> None:
        nonlocal eval_s
        start = time.perf_counter()
        val_steps.append(t)
        val_losses.append(float(val_loss({**fixed, **params}, held)))
        val_times.append(compile_s + time.perf_counter() - t0)
        eval_s += time.perf_counter() - start if t else 0.0

    evaluate_heldout(0)
    from tqdm import tqdm

    bar = tqdm(range(steps), desc=f"{optimizer:>5}", file=sys.stderr, disable=not progress,
               leave=True, dynamic_ncols=True)
    for t in bar:
        data = {k: xp.asarray(v) for k, v in windows(corpus.train, starts[t], seq_len).items()}
        params, state, loss = step(params, fixed, state, data)
        losses.append(loss)
        if t == 0:  # the first call compiles; time it apart
            jax.block_until_ready(params)
            compile_s, t0 = time.perf_counter() - t0, time.perf_counter()
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            evaluate_heldout(t + 1)
            bar.set_postfix(loss=f"{float(loss):.3f}", val=f"{val_losses[-1]:.3f}")
    bar.close()
    jax.block_until_ready(params)
    train_s = time.perf_counter() - t0 - eval_s
    return TrainResult(optimizer, lr, config,
                       steps, batch, seq_len, seed, np.asarray([float(v) for v in losses]),
                       np.asarray(val_steps), np.asarray(val_losses),
                       {k: np.asarray(v) for k, v in {**fixed, **params}.items()},
                       compile_s, train_s,
                       np.asarray(val_times))



def _check_init(graph: Any, init: Any) -> dict[str, np.ndarray]:
    """``init`` as float arrays keyed by exactly the graph's parameter nodes, shapes checked
    (the error names the node)."""
    from nlaverify.errors import ShapeError

    want = {n: tuple(int(d) for d in a["shape"]) for n, a in graph.nodes(data=True)
            if a["kind"] == "param"}
    missing, extra = sorted(set(want) - set(init)), sorted(set(init) - set(want))
    if missing or extra:
        what = (f"no value for parameter node {missing[0]!r}" if missing
                else f"{extra[0]!r} is not a parameter node of the graph")
        raise ArgumentError(f"train: init: {what}")
    out = {}
    for n, shape in want.items():
        a = np.asarray(init[n])
        if a.shape != shape:
            raise ShapeError(f"train: init: node {n!r}: expected shape {shape}, got {a.shape}")
        out[n] = a
    return out


def _smooth(y: np.ndarray, width: int) -> np.ndarray:
    """The trailing mean over ``width`` steps (shorter at the start)."""
    c = np.concatenate([[0.0], np.cumsum(y)])
    i = np.arange(1, len(y) + 1)
    lo = np.maximum(0, i - width)
    return (c[i] - c[lo]) / (i - lo)


def draw_training(results: list[TrainResult], path: str | Path,
                  corpus: Corpus | None = None) -> None:
    r"""The loss curves of ``results`` as one figure: per optimizer, the batch loss (faint),
    its trailing mean and the held-out loss (markers) against the step, with the levels
    :math:`\log V`, :math:`H_1` and :math:`H_2` of :func:`entropies` as horizontal lines.
    Timings are left out, so the figure depends on the losses only: matplotlib's Agg
    backend, an SVG byte-reproducible (fixed ``svg.hashsalt``, text kept as text, no date),
    written atomically."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.symbolic.document import write_atomically

    if not results:
        raise ArgumentError("draw_training: expected at least one TrainResult, got none")
    corpus = load_corpus() if corpus is None else corpus
    h1, h2 = entropies(corpus.train, corpus.vocab_size)
    plt.rcParams.update({"svg.hashsalt": "nlaverify", "svg.fonttype": "none",
                         "font.size": 9})
    fig, ax = plt.subplots(figsize=(9.0, 5.0))
    colours = {"sgd": "tab:blue", "adamw": "tab:orange", "muon": "tab:green"}
    for r in results:
        c = colours.get(r.optimizer, "k")
        width = max(1, r.steps // 30)
        ax.plot(np.arange(r.steps), r.losses, color=c, lw=0.5, alpha=0.25)
        ax.plot(np.arange(r.steps), _smooth(r.losses, width), color=c, lw=1.2,
                label=f"{r.optimizer} ($\\eta = {r.lr:g}$): batch loss, trailing mean of {width}")
        ax.plot(r.val_steps, r.val_losses, color=c, ls="--", lw=0.9, marker="o", ms=3,
                label=f"{r.optimizer}: held-out loss (final {r.val_losses[-1]:.3f})")
    for level, ls, name, below in (
            (math.log(corpus.vocab_size), ":", "uniform $\\log V$", False),
            (h1, "-.", "unigram entropy $H_1$ of the training text", False),
            (h2, (0, (1, 3)), "bigram conditional entropy $H_2$ of the training text", True)):
        ax.axhline(level, color="0.4", lw=0.8, ls=ls)
        ax.annotate(f"{name} = {level:.2f}", (0.995, level), xytext=(0, -2 if below else 2),
                    xycoords=("axes fraction", "data"), textcoords="offset points",
                    color="0.3", fontsize=7, ha="right", va="top" if below else "bottom")
    low = min(h2, *(float(r.losses.min()) for r in results))
    ax.set_ylim(low - 0.2, max(float(r.losses[0]) for r in results) + 0.1)
    ax.grid(True, alpha=0.3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.legend(fontsize=7, loc="upper right", bbox_to_anchor=(1.0, 0.76))  # under log V
    r0, cfg = results[0], results[0].config
    ax.set_title(f"Next-character prediction on the Baggag & Saad passage "
                 f"({len(corpus.text) / 1000:.0f} kB, V = {corpus.vocab_size}, "
                 f"{len(corpus.val)} held out)\n{cfg.name}: d = {cfg.d_model}, "
                 f"{cfg.n_blocks} blocks, batch {r0.batch} x {r0.seq_len} characters, "
                 f"float64, seed {r0.seed}", fontsize=10)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    target = Path(path)
    write_atomically(target.parent, {target.name: buf.getvalue()})


def format_result(r: TrainResult) -> str:
    """One line: the optimizer, its rate, the first and last losses, the timings."""
    tail = r.losses[-max(1, r.steps // 20):].mean()
    return (f"{r.optimizer:<6} lr {r.lr:<8g} batch loss {r.losses[0]:.3f} -> {tail:.3f} "
            f"(mean of the last {max(1, r.steps // 20)})  held-out {r.val_losses[0]:.3f} -> "
            f"{r.val_losses[-1]:.3f}  ({r.steps} steps, compile {r.compile_s:.1f} s, "
            f"{r.ms_per_step:.2f} ms/step)")
