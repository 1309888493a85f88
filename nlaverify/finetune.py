r"""Fine-tuning the graph-lowered Transformer: full, LoRA, and in a random subspace
(Baggag & Saad §3.14 intrinsic dimension, §4.1 Table 6, §4.2 LoRA).

The task: a model pre-trained on the shipped passage (:func:`nlaverify.train.train`) is
fine-tuned on the same passage *read backwards* (:func:`reversed_corpus`): the same
characters and unigram frequencies, different conditional statistics, so that adaptation
is needed and measurable (the held-out loss of the reversed text).

* Full fine-tuning updates every parameter.
* LoRA (Hu et al. 2022) freezes the pre-trained weights and trains rank-:math:`r` adapters
  :math:`A` (drawn) and :math:`B = 0` (:func:`lora_init`: the adapted model starts as the
  pre-trained one, identity ``lora_merge``).
* The intrinsic dimension (Li et al. 2018; Aghajanyan et al. 2021 for fine-tuning) trains
  :math:`\theta = \theta_0 + Pz`, :math:`z \in \mathbb R^{D}` with a fixed random
  :math:`P` of unit-norm Gaussian columns (:func:`subspace_finetune`);
  :func:`intrinsic_dimension` is the smallest :math:`D` reaching 90 % of full fine-tuning's
  improvement.
* :func:`gradient_spectra`: the singular values of each weight matrix's gradient, and the rank
  that holds a fraction of its energy (the low-rank structure LoRA relies on, §4.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.train import Corpus, TrainResult, load_corpus, train

#: the adapters' parameter component (nlaverify.graph.build)
LORA_COMPONENT = "lora"


def reversed_corpus(corpus: Corpus | None = None, val_fraction: float = 0.1) -> Corpus:
    """The passage read backwards, in ``corpus``'s vocabulary (same token ids), split as
    :func:`~nlaverify.train.load_corpus` splits: the fine-tuning task."""
    corpus = load_corpus() if corpus is None else corpus
    text = corpus.text[::-1]
    ids = corpus.encode(text)
    cut = len(ids) - math.ceil(val_fraction * len(ids))
    return Corpus(text, corpus.vocab, ids[:cut], ids[cut:])


def lora_names(config: TransformerConfig) -> list[str]:
    """The adapter parameters (``*.lora_A``, ``*.lora_B``) of ``config``'s graph."""
    from nlaverify.graph.build import build_transformer

    return [n for n, a in build_transformer(config).nodes(data=True)
            if a["kind"] == "param" and a["component"] == LORA_COMPONENT]


def lora_init(config: TransformerConfig, base: Mapping[str, Any], seed: int = 0
              ) -> dict[str, np.ndarray]:
    r"""Parameters of LoRA config ``config`` from the pre-trained ``base`` (the parameters
    of ``config.replace(lora_rank=0)``): every base weight as it is, :math:`A` with entries
    :math:`N(0, 1/d_{in})` (seeded) and :math:`B = 0`, so the adapted model computes the
    pre-trained function (Hu et al. 2022 §4.1)."""
    from nlaverify.graph.build import build_transformer

    if not config.lora_rank:
        raise ArgumentError("lora_init: argument 'config': expected lora_rank >= 1, got 0")
    graph = build_transformer(config)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, attrs in graph.nodes(data=True):
        if attrs["kind"] != "param":
            continue
        shape = tuple(int(s) for s in attrs["shape"])
        if name.endswith(".lora_A"):
            out[name] = rng.standard_normal(shape) / math.sqrt(shape[0])
        elif name.endswith(".lora_B"):
            out[name] = np.zeros(shape)
        elif name not in base:
            raise ArgumentError(f"lora_init: argument 'base': no value for parameter node "
                                f"{name!r} of the pre-trained model")
        else:
            out[name] = np.asarray(base[name])
    return out


def merge_lora(config: TransformerConfig, params: Mapping[str, Any]
               ) -> tuple[TransformerConfig, dict[str, np.ndarray]]:
    r"""The adapted model as a plain one: ``config`` without LoRA and every adapted weight
    merged, :math:`W = W_0 + sAB` (:math:`s = \alpha/r`; identity ``lora_merge``), the
    adapters dropped — what an implementation without LoRA (or a checkpoint) holds."""
    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer
    from nlaverify.ops.lora import lora_linear

    xp = get_namespace("numpy")
    if not config.lora_rank:
        raise ArgumentError("merge_lora: argument 'config': expected lora_rank >= 1, got 0")
    graph = build_transformer(config)
    want = {n for n, a in graph.nodes(data=True) if a["kind"] == "param"}
    if set(params) != want:
        bad = sorted(want ^ set(params))[0]
        raise ArgumentError(f"merge_lora: argument 'params': {bad!r} is "
                            + ("missing" if bad in want else "not a parameter of the graph"))
    out = {k: np.asarray(v) for k, v in params.items() if not k.endswith((".lora_A",
                                                                         ".lora_B"))}
    for node, attrs in graph.nodes(data=True):
        if attrs.get("op") in ("lora_linear", "lora_affine"):
            W, A, B = _lora_args(graph, node)
            # the op itself on the identity rows: I W + s (I A) B = W + s A B, exactly the
            # merged weight of identity lora_merge (a product with I rounds nothing)
            Wv = np.asarray(params[W])
            out[W] = np.asarray(lora_linear(xp, np.eye(Wv.shape[0], dtype=Wv.dtype), Wv,
                                            np.asarray(params[A]), np.asarray(params[B]),
                                            scale=config.lora_scale))
    return config.replace(lora_rank=0, lora_alpha=None), out


def _lora_args(graph: Any, node: str) -> tuple[str, str, str]:
    """The names of ``W``, ``A`` and ``B`` of a LoRA op node (its inputs end so)."""
    from nlaverify.graph.core import _arguments

    args = _arguments(graph, node)
    W = args[1]
    return W, args[-2], args[-1]


@dataclass(frozen=True)
class FinetuneRun:
    """One fine-tuning run: its label, the number of trained parameters, the held-out loss
    of the reversed text before and after, and the held-out curve."""

    label: str
    trainable: int
    start_loss: float
    final_loss: float
    val_steps: np.ndarray
    val_losses: np.ndarray

    @property
    def improvement(self) -> float:
        return self.start_loss - self.final_loss

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "trainable": self.trainable, "start_loss": self.start_loss,
                "final_loss": self.final_loss, "improvement": self.improvement}


def _run(label: str, trainable: int, r: TrainResult) -> FinetuneRun:
    return FinetuneRun(label, trainable, float(r.val_losses[0]), float(r.val_losses[-1]),
                       r.val_steps, r.val_losses)


def full_finetune(config: TransformerConfig, base: Mapping[str, Any], corpus: Corpus,
                  steps: int, *, optimizer: str = "adamw", lr: float | None = None,
                  seed: int = 0, batch: int = 16) -> FinetuneRun:
    """Every parameter trained from ``base``."""
    r = train(config, optimizer, steps, corpus=corpus, init=base, lr=lr, seed=seed,
              batch=batch)
    return _run("full", sum(int(np.size(v)) for v in base.values()), r)


def lora_finetune(config: TransformerConfig, base: Mapping[str, Any], corpus: Corpus,
                  steps: int, rank: int, targets: Sequence[str] = ("q", "v"), *,
                  alpha: float | None = None, optimizer: str = "adamw",
                  lr: float | None = None, seed: int = 0, batch: int = 16) -> FinetuneRun:
    """LoRA of rank ``rank`` on ``targets``: only the adapters trained, from
    :func:`lora_init`."""
    cfg = config.replace(lora_rank=rank, lora_targets=tuple(targets), lora_alpha=alpha)
    init = lora_init(cfg, base, seed)
    names = lora_names(cfg)
    r = train(cfg, optimizer, steps, corpus=corpus, init=init, trainable=names, lr=lr,
              seed=seed, batch=batch)
    return _run(f"LoRA r={rank} ({','.join(targets)})",
                sum(int(np.size(init[n])) for n in names), r)


def subspace_finetune(config: TransformerConfig, base: Mapping[str, Any], corpus: Corpus,
                      steps: int, dim: int, *, lr: float = 3e-2, seed: int = 0,
                      batch: int = 16, eval_every: int | None = None) -> FinetuneRun:
    r"""Train :math:`\theta = \theta_0 + Pz` over :math:`z \in \mathbb R^{\text{dim}}`
    (:math:`z_0 = 0`; :math:`P \in \mathbb R^{N\times\text{dim}}` Gaussian with unit-norm
    columns, seeded), with Adam on :math:`z`; the gradient is :math:`P^\top\nabla_\theta L`
    from the graph's hand-derived VJPs (Li et al. 2018, the dense projection)."""
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import backprop, evaluate
    from nlaverify.optim import rules
    from nlaverify.train import heldout_windows, window_starts, windows

    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ArgumentError(f"subspace_finetune: dim: expected a positive integer, got {dim!r}")
    graph, xp = build_transformer(config), get_namespace("jax")
    names = sorted(base)
    shapes = [np.shape(base[n]) for n in names]
    sizes = [int(np.prod(s)) for s in shapes]
    theta0 = jnp.concatenate([jnp.ravel(jnp.asarray(base[n])) for n in names])
    P = np.random.default_rng(seed).standard_normal((theta0.size, dim))
    P = jnp.asarray(P / np.linalg.norm(P, axis=0))
    offsets = np.cumsum([0, *sizes])

    def unflat(theta: Any) -> dict[str, Any]:
        return {n: theta[offsets[i]:offsets[i + 1]].reshape(shapes[i])
                for i, n in enumerate(names)}

    def loss_and_grad(z: Any, data: dict[str, Any]) -> tuple[Any, Any]:
        params = unflat(theta0 + P @ z)
        values = evaluate(graph, xp, {**data, **params})
        cot = backprop(graph, xp, values, "loss")
        g = jnp.concatenate([jnp.ravel(cot[n]) if n in cot else jnp.zeros(sizes[i])
                             for i, n in enumerate(names)])
        return values["loss"], P.T @ g

    rule = rules.adam(lr)

    @jax.jit
    def step(z: Any, state: Any, data: dict[str, Any]) -> Any:
        loss, g = loss_and_grad(z, data)
        updates, state = rule.update(xp, {"z": g}, state, {"z": z})
        return z + updates["z"], state, loss

    @jax.jit
    def heldout(z: Any, data: dict[str, Any]) -> Any:
        return evaluate(graph, xp, {**data, **unflat(theta0 + P @ z)}, outputs=["loss"])["loss"]

    seq_len = config.context
    starts = window_starts(len(corpus.train), steps, batch, seq_len, seed)
    held = {k: jnp.asarray(v) for k, v in heldout_windows(corpus.val, seq_len).items()}
    eval_every = max(1, steps // 10) if eval_every is None else eval_every
    z = jnp.zeros(dim, dtype=theta0.dtype)
    state = rule.init(xp, {"z": z})
    val_steps, val_losses = [0], [float(heldout(z, held))]
    for t in range(steps):
        data = {k: jnp.asarray(v) for k, v in windows(corpus.train, starts[t], seq_len).items()}
        z, state, _ = step(z, state, data)
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            val_steps.append(t + 1)
            val_losses.append(float(heldout(z, held)))
    return FinetuneRun(f"subspace D={dim}", dim, val_losses[0], val_losses[-1],
                       np.asarray(val_steps), np.asarray(val_losses))


def intrinsic_dimension(runs: Sequence[FinetuneRun], full: FinetuneRun,
                        fraction: float = 0.9) -> int | None:
    r"""The smallest subspace dimension :math:`D` whose improvement reaches ``fraction`` of
    full fine-tuning's (Li et al. 2018's :math:`d_{90}`), among ``runs``; ``None`` if
    none does."""
    if not 0 < fraction <= 1:
        raise ArgumentError(f"intrinsic_dimension: fraction: expected a number in (0, 1], "
                            f"got {fraction!r}")
    if not full.improvement > 0:  # also nan
        raise ArgumentError(f"intrinsic_dimension: full: expected full fine-tuning to improve "
                            f"the held-out loss, got an improvement of {full.improvement!r} "
                            f"(no fraction of it is meaningful)")
    good = [r.trainable for r in runs if r.improvement >= fraction * full.improvement]
    return min(good) if good else None


def gradient_spectra(config: TransformerConfig, params: Mapping[str, Any],
                     data: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The singular values (descending) of the loss gradient of every 2-D weight of the
    blocks (attention and MLP projections) at ``params`` on ``data``, by node; the gradient
    from the graph's VJPs (float64, NumPy)."""
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import run_graph

    graph = build_transformer(config)
    ev = run_graph(graph, "numpy", dict(params), dict(data))
    out = {}
    for name, attrs in graph.nodes(data=True):
        if attrs["kind"] == "param" and attrs["block"] is not None and len(attrs["shape"]) == 2:
            out[name] = np.linalg.svd(np.asarray(ev.cotangents[name]), compute_uv=False)
    return out


def energy_rank(sigma: np.ndarray, fraction: float = 0.9) -> int:
    r"""The smallest :math:`k` with :math:`\sum_{i\le k}\sigma_i^2 \ge` ``fraction``
    :math:`\sum_i \sigma_i^2` (the rank holding that share of the Frobenius energy), between
    1 and ``len(sigma)`` (0 for a zero spectrum).

    Decided exactly: the squares, their sums and ``fraction`` times the total are taken in
    rational arithmetic on the binary values of ``sigma`` (``fractions.Fraction``; the
    denominators are powers of two, so this is cheap), so no rounding of a partial sum can
    push the answer past ``len(sigma)`` or drop a tiny last value at ``fraction = 1``.
    ``fraction`` is taken at its exact binary value too.

    Raises:
        ArgumentError: ``sigma`` not a non-empty vector of finite numbers;
            ``fraction`` not in :math:`(0, 1]`.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating)) or (
            not 0 < fraction <= 1):
        raise ArgumentError(f"energy_rank: fraction: expected a number in (0, 1], got "
                            f"{fraction!r}")
    v = np.asarray(sigma, dtype=float)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ArgumentError(f"energy_rank: sigma: expected a non-empty vector of finite "
                            f"numbers, got shape {np.shape(sigma)}"
                            + ("" if v.ndim != 1 or v.size == 0 else " with inf or nan"))
    s2 = [Fraction(float(x)) ** 2 for x in v]
    total = sum(s2, Fraction(0))
    if total == 0:
        return 0
    target = Fraction(float(fraction)) * total
    running = Fraction(0)
    for k, e in enumerate(s2, start=1):
        running += e
        if running >= target:
            return k
    return v.size  # unreachable: target <= total


def draw_finetune(full: FinetuneRun, lora: Sequence[FinetuneRun],
                  subspace: Sequence[FinetuneRun], pretrained_loss: float,
                  path: str | Path) -> Path:
    """Held-out loss of the reversed text after fine-tuning against the number of trained
    parameters: LoRA ranks, random subspaces and full fine-tuning (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.symbolic.document import save_svg

    with matplotlib.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        _finetune_axes(ax, full, lora, subspace, pretrained_loss)
        return save_svg(fig, path)


#: byte-reproducible SVGs (fixed hash salt, text kept as text)
_RC = {"svg.hashsalt": "nlaverify", "svg.fonttype": "none", "font.size": 9}


def _finetune_axes(ax: Any, full: FinetuneRun, lora: Sequence[FinetuneRun],
                   subspace: Sequence[FinetuneRun], pretrained_loss: float) -> None:
    ax.plot([r.trainable for r in subspace], [r.final_loss for r in subspace], "o-",
            color="tab:gray", label="random subspace (intrinsic dimension)")
    ax.plot([r.trainable for r in lora], [r.final_loss for r in lora], "s-", color="tab:blue",
            label="LoRA (rank 1, 2, 4, 8)")
    ax.plot([full.trainable], [full.final_loss], "*", ms=14, color="tab:red",
            label="full fine-tuning")
    ax.axhline(full.start_loss, color="k", ls=":", lw=1, label="before fine-tuning")
    ax.axhline(full.start_loss - 0.9 * full.improvement, color="tab:red", ls="--", lw=1,
               label="90 % of full fine-tuning's improvement")
    ax.set_xscale("log")
    ax.set_xlabel("trained parameters")
    ax.set_ylabel("held-out loss, reversed text (nats/char)")
    ax.set_title(f"tiny fine-tuned to the passage read backwards (pre-trained forward "
                 f"{pretrained_loss:.2f})", fontsize=9)
    ax.legend(fontsize=7)


def draw_gradient_spectra(spectra: Mapping[str, np.ndarray], path: str | Path,
                          title: str) -> Path:
    """Cumulative energy share of the leading singular values of each weight gradient."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.symbolic.document import save_svg

    with matplotlib.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(7.0, 4.0))
        _spectra_axes(ax, spectra, title)
        return save_svg(fig, path)


def _spectra_axes(ax: Any, spectra: Mapping[str, np.ndarray], title: str) -> None:
    """One curve per weight: the colour its block (a sequential map, with a colour bar),
    the line style its matrix (a legend outside the axes): 24 curves stay readable."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    def split(name: str) -> tuple[int, str]:
        parts = name.split(".")
        block = int(parts[1]) if parts[0] == "blocks" and parts[1].isdigit() else 0
        return block, ".".join(parts[2:]) if parts[0] == "blocks" else name

    keyed = {name: split(name) for name in spectra}
    blocks = sorted({b for b, _ in keyed.values()})
    kinds = list(dict.fromkeys(k for _, k in keyed.values()))
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2))]
    cmap = plt.get_cmap("viridis")
    norm = mpl.colors.Normalize(vmin=min(blocks) - 0.5, vmax=max(blocks) + 0.5)
    for name, s in spectra.items():
        block, kind = keyed[name]
        share = np.cumsum(s**2) / np.sum(s**2)
        ax.plot(np.arange(1, len(s) + 1), share, lw=1.1,
                color=cmap(norm(block) * 0.9), ls=styles[kinds.index(kind) % len(styles)])
    ax.axhline(0.9, color="k", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("k (leading singular values)")
    ax.set_ylabel("share of the gradient's Frobenius energy")
    ax.set_title(title, fontsize=9)
    handles = [mpl.lines.Line2D([], [], color="0.3", lw=1.1,
                                ls=styles[i % len(styles)], label=k)
               for i, k in enumerate(kinds)]
    # the lower right is empty: every share reaches 0.9 well before k = 20
    ax.legend(handles=handles, fontsize=6, title="matrix", title_fontsize=6,
              loc="lower right", ncol=2, frameon=False)
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=mpl.colors.ListedColormap(
        [cmap(norm(b) * 0.9) for b in blocks]))
    bar = plt.colorbar(sm, ax=ax, ticks=blocks, fraction=0.05, pad=0.02)
    bar.set_label("block", fontsize=7)
    bar.ax.tick_params(labelsize=6)


@dataclass
class FinetuneStudy:
    """Pre-training, then full, LoRA and random-subspace fine-tuning on the reversed text."""

    pretrained_loss: float
    full: FinetuneRun
    lora: list[FinetuneRun]
    subspace: list[FinetuneRun]

    @property
    def d90(self) -> int | None:
        """:func:`intrinsic_dimension` of the subspace runs; ``None`` when none reaches 90 %
        or when full fine-tuning did not improve the loss."""
        if not self.full.improvement > 0:
            return None
        return intrinsic_dimension(self.subspace, self.full)

    def lines(self) -> list[str]:
        full_ok = self.full.improvement > 0
        out = [f"pre-trained held-out loss (forward text) {self.pretrained_loss:.3f}; reversed "
               f"text before fine-tuning {self.full.start_loss:.3f}"]
        for r in (self.full, *self.lora, *self.subspace):
            share = (f"{100 * r.improvement / self.full.improvement:5.1f} % of full"
                     if full_ok else "  n/a % of full")
            out.append(f"  {r.label:<28} {r.trainable:>6} trained  loss {r.final_loss:.3f}  "
                       f"improvement {r.improvement:.3f} ({share})")
        if not full_ok:
            out.append("  intrinsic dimension d90: none (full fine-tuning did not improve the "
                       "loss)")
            return out
        d90 = self.d90
        largest = max((r.trainable for r in self.subspace), default=0)
        out.append("  intrinsic dimension d90: " + (f"{d90}" if d90 is not None
                                                     else f"> {largest}"))
        return out


def finetune_study(preset_name: str = "tiny", *, pretrain_steps: int = 500,
                   steps: int = 300, ranks: Sequence[int] = (1, 2, 4, 8),
                   targets: Sequence[str] = ("q", "k", "v", "o", "mlp"),
                   dims: Sequence[int] = (16, 64, 256, 1024, 2048), seed: int = 0
                   ) -> FinetuneStudy:
    """Pre-train ``preset_name`` (character vocabulary) with AdamW on the passage, then
    fine-tune it on the passage read backwards: fully, with LoRA of each rank on
    ``targets``, and in random subspaces of each dimension (same steps, batch and seed)."""
    from nlaverify.train import char_config

    corpus = load_corpus()
    task = reversed_corpus(corpus)
    cfg = char_config(preset_name, corpus.vocab_size)
    pre = train(cfg, "adamw", pretrain_steps, corpus=corpus, seed=seed)
    base = pre.params
    full = full_finetune(cfg, base, task, steps, seed=seed)
    lora = [lora_finetune(cfg, base, task, steps, r, targets, seed=seed) for r in ranks]
    sub = [subspace_finetune(cfg, base, task, steps, D, seed=seed) for D in dims]
    return FinetuneStudy(float(pre.val_losses[-1]), full, lora, sub)
