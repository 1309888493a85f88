r"""A masked-diffusion language model on the graph (Baptista, Stuart & Tran §9; Sahoo et al.
2024, MDLM; Shi et al. 2024, MD4): the bidirectional Transformer of ``build_transformer``
(``causal=False``, one extra token id for the mask) trained on the shipped passage with the
continuous-time negative ELBO of :mod:`nlaverify.diffusion` (linear schedule
:math:`\alpha_t = 1 - t`), its held-out bound, and its ancestral sampler.

The objective per window :math:`x_0` of :math:`L` characters (identity
``masked_elbo_continuous_limit``), in nats per character,

.. math:: \frac1L\,\mathbb E_{t}\Bigl[\frac{1}{t}\sum_{\ell:\,x_t^\ell = m}
          -\log p_\theta(x_0^\ell \mid x_t)\Bigr] \ \ge\ -\frac1L\log p_\theta(x_0),

with :math:`t = v^2` (:math:`v` stratified over the batch) and the importance weight
:math:`2\sqrt t` (uniform times give the estimator an infinite variance, see
:func:`nlaverify.diffusion.nelbo_samples`); the model's logits of the mask are never used
(MDLM's zero masking probabilities). Gradients are JAX autodiff of the graph's forward
(``evaluate`` on the JAX namespace), the update nlaverify's AdamW rule.

The sampler runs the reverse process in ``T`` steps from the all-mask sequence: from
:math:`t` to :math:`s = t - 1/T` each masked position is revealed with probability
:math:`(\alpha_s - \alpha_t)/(1 - \alpha_t)`, to a token drawn from the model's
:math:`p_\theta(\cdot \mid x_t)` (the posterior of identity ``masked_posterior_two_point``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlaverify.config import TransformerConfig
from nlaverify.corpus import Corpus, heldout_windows, load_corpus, window_starts, windows
from nlaverify.errors import ArgumentError

__all__ = ["DiffusionResult", "bits_per_char", "diffusion_config", "draw_comparison",
           "heldout_nelbo", "sample", "train_diffusion"]


def diffusion_config(name: str, vocab: int) -> TransformerConfig:
    """Preset ``name`` as a bidirectional denoiser over ``vocab`` characters and the mask
    (id ``vocab``)."""
    from nlaverify.train import char_config

    return char_config(name, vocab + 1).replace(causal=False, name=f"{name}-diffusion")


def _check_denoiser(op: str, config: TransformerConfig, V: int) -> None:
    """A masked-diffusion denoiser over ``V`` tokens: bidirectional, with the mask (id ``V``)
    in its vocabulary."""
    if isinstance(V, bool) or not isinstance(V, int) or V < 1:
        raise ArgumentError(f"{op}: argument 'V': expected an integer >= 1, got {V!r}")
    if config.vocab_size < V + 1:
        raise ArgumentError(f"{op}: argument 'config': the mask token (id {V}) is missing: "
                            f"expected vocab_size >= {V + 1} ({V} tokens and the mask), got "
                            f"{config.vocab_size} (build it with diffusion_config)")
    if config.causal:
        raise ArgumentError(f"{op}: argument 'config': expected a bidirectional denoiser "
                            f"(causal=False), got causal=True")


def _nelbo(graph: Any, xp: Any, params: dict[str, Any], x0: Any, v: Any, u: Any,
           V: int) -> Any:
    """The Monte-Carlo negative ELBO of a batch ``x0`` ``(B, L)`` at times ``t = v**2``
    (uniforms ``u`` ``(B, L)`` choose the masks), nats per character (a JAX function)."""
    import jax
    import jax.numpy as jnp

    from nlaverify.diffusion import SCHEDULES, masking_weight
    from nlaverify.graph.core import evaluate

    linear = SCHEDULES["linear"]
    t = v * v
    masks = u < (1 - linear.alpha(xp, t))[:, None]
    xt = jnp.where(masks, V, x0)
    logits = evaluate(graph, xp, {**params, "tokens": xt, "targets": xt},
                      outputs=["logits"])["logits"][..., :V]
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), x0[..., None], -1)[..., 0]
    # the proved weight -alpha'/(1 - alpha), times the importance weight 1/g(t) = 2 sqrt(t)
    per_seq = jnp.sum(jnp.where(masks, ce, 0.0), -1) * masking_weight(xp, linear, t) * 2 * v
    return jnp.mean(per_seq) / x0.shape[-1]


@dataclass
class DiffusionResult:
    """A training run: the batch bound before each step, the held-out bound at
    ``val_steps`` (nats per character), the final parameters, the time per step."""

    config: TransformerConfig
    steps: int
    losses: np.ndarray
    val_steps: np.ndarray
    val_nelbo: np.ndarray
    params: dict[str, np.ndarray] = field(repr=False)
    ms_per_step: float = 0.0


def _draws(rng: np.random.Generator, B: int, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified ``v`` in ``(0, 1]`` over the batch and the mask uniforms."""
    v = (np.arange(B) + 1.0 - rng.random(B)) / B
    return v, rng.random((B, L))


def heldout_nelbo(config: TransformerConfig, params: dict[str, Any], corpus: Corpus,
                  seq_len: int, draws: int = 16, seed: int = 1) -> float:
    """The held-out negative ELBO, nats per character: every non-overlapping held-out window,
    ``draws`` Monte-Carlo times each (fixed seed): an upper bound on the model's held-out
    negative log-likelihood, up to its Monte-Carlo error."""
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer

    _check_denoiser("heldout_nelbo", config, corpus.vocab_size)
    graph, xp = build_transformer(config), get_namespace("jax")
    x0 = jnp.asarray(heldout_windows(corpus.val, seq_len)["tokens"])
    fn = jax.jit(lambda p, x, v, u: _nelbo(graph, xp, p, x, v, u, corpus.vocab_size))
    rng = np.random.default_rng(seed)
    p = {k: jnp.asarray(v) for k, v in params.items()}
    vals = []
    for _ in range(draws):
        v, u = _draws(rng, x0.shape[0], seq_len)
        vals.append(float(fn(p, x0, jnp.asarray(v), jnp.asarray(u))))
    return float(np.mean(vals))


def train_diffusion(preset_name: str, steps: int, *, seq_len: int | None = None,
                    batch: int = 16, lr: float = 1e-2, seed: int = 0,
                    eval_every: int | None = None, corpus: Corpus | None = None
                    ) -> DiffusionResult:
    """Train the masked-diffusion model of ``preset_name`` for ``steps`` AdamW steps on
    ``batch`` random windows of the passage (module docstring)."""
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params
    from nlaverify.optim.rules import adamw, apply_updates

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ArgumentError(f"train_diffusion: argument 'steps': expected an integer >= 1, "
                            f"got {steps!r}")
    corpus = load_corpus() if corpus is None else corpus
    if corpus.bpe is not None:
        raise ArgumentError("train_diffusion: expected a character corpus (load_corpus)")
    config = diffusion_config(preset_name, corpus.vocab_size)
    seq_len = config.context if seq_len is None else seq_len
    eval_every = max(1, steps // 10) if eval_every is None else eval_every
    graph, xp = build_transformer(config), get_namespace("jax")
    V = corpus.vocab_size
    rule = adamw(lr)

    def step(params: Any, state: Any, x0: Any, v: Any, u: Any) -> Any:
        loss, grads = jax.value_and_grad(lambda p: _nelbo(graph, xp, p, x0, v, u, V))(params)
        updates, state = rule.update(xp, grads, state, params)
        return apply_updates(xp, params, updates), state, loss

    jstep = jax.jit(step)
    params = {k: jnp.asarray(v) for k, v in init_params(graph, seed).items()}
    state = rule.init(xp, params)
    starts = window_starts(len(corpus.train), steps, batch, seq_len, seed)
    rng = np.random.default_rng([seed, 0xD1FF])
    losses, val_steps, val = [], [0], [heldout_nelbo(config, params, corpus, seq_len)]
    t0 = time.perf_counter()
    for t in range(steps):
        x0 = jnp.asarray(windows(corpus.train, starts[t], seq_len)["tokens"])
        v, u = _draws(rng, batch, seq_len)
        params, state, loss = jstep(params, state, x0, jnp.asarray(v), jnp.asarray(u))
        losses.append(float(loss))
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            val_steps.append(t + 1)
            val.append(heldout_nelbo(config, params, corpus, seq_len))
    elapsed = time.perf_counter() - t0
    return DiffusionResult(config, steps, np.asarray(losses), np.asarray(val_steps),
                           np.asarray(val), {k: np.asarray(v) for k, v in params.items()},
                           1e3 * elapsed / steps)


def sample(config: TransformerConfig, params: dict[str, Any], V: int, length: int, *,
           steps: int = 32, seed: int = 0) -> np.ndarray:
    r"""Ancestral sampling of ``length`` characters in ``steps`` reverse steps (module
    docstring), from the all-mask sequence; every position is revealed by :math:`t = 0`."""
    import jax
    import jax.numpy as jnp

    from nlaverify.backends import get_namespace
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.core import evaluate

    _check_denoiser("sample", config, V)
    if not 1 <= length <= config.context:
        raise ArgumentError(f"sample: argument 'length': expected 1 <= length <= "
                            f"{config.context}, got {length}")
    graph, xp = build_transformer(config), get_namespace("jax")
    probs = jax.jit(lambda p, x: jax.nn.softmax(evaluate(
        graph, xp, {**p, "tokens": x, "targets": x}, outputs=["logits"])["logits"][:, :V], -1))
    from nlaverify.diffusion import SCHEDULES, step_weight

    npx = get_namespace("numpy")
    p = {k: jnp.asarray(v) for k, v in params.items()}
    rng = np.random.default_rng(seed)
    x = np.full(length, V, dtype=np.int64)
    for i in range(steps, 0, -1):
        t, s = i / steps, (i - 1) / steps
        masked = x == V
        if not masked.any():
            break
        reveal = masked & (rng.random(length) < step_weight(npx, SCHEDULES["linear"], s, t))
        if reveal.any():
            q = np.asarray(probs(p, jnp.asarray(x)), dtype=np.float64)
            for pos in np.flatnonzero(reveal):
                row = q[pos] / q[pos].sum()
                x[pos] = int(np.searchsorted(np.cumsum(row), rng.random(), side="right")
                             .clip(0, V - 1))
    return x


def bits_per_char(nats: Any) -> Any:
    """Nats per character (a number or an array) as bits per character."""
    return nats / math.log(2)


def draw_comparison(path: str, steps: int = 3000, preset_name: str = "tiny", seed: int = 0
                    ) -> tuple[Any, DiffusionResult, str]:
    """Train the autoregressive model (AdamW, :func:`nlaverify.train.train`) and the
    masked-diffusion model for ``steps`` each on the passage, and draw their held-out losses
    against the steps in bits per character: the autoregressive cross-entropy (an exact
    negative log-likelihood) and the diffusion negative ELBO (an upper bound on its
    model's); a diffusion sample in the title. Returns both runs and the sample."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nlaverify.symbolic.document import save_svg
    from nlaverify.train import train

    corpus = load_corpus()
    ar = train(preset_name, "adamw", steps, seed=seed, corpus=corpus)
    diff = train_diffusion(preset_name, steps, seed=seed, corpus=corpus)
    text = corpus.decode(sample(diff.config, diff.params, corpus.vocab_size,
                                diff.config.context, seed=seed))
    with matplotlib.rc_context({"svg.hashsalt": "nlaverify", "font.size": 8}):
        fig, ax = plt.subplots(figsize=(7.0, 4.0))
        ax.plot(ar.val_steps, bits_per_char(np.asarray(ar.val_losses)), "o-", ms=3,
                color="C0", label="autoregressive: held-out cross-entropy (exact NLL)")
        ax.plot(diff.val_steps, bits_per_char(diff.val_nelbo), "s-", ms=3, color="C3",
                label="masked diffusion: held-out negative ELBO (upper bound)")
        ax.set_xlabel("training step (AdamW, batch 16)")
        ax.set_ylabel("bits per character")
        ax.set_title(f"{preset_name} on the Baggag & Saad passage: autoregressive against masked "
                     f"diffusion\n(a diffusion sample: {text!r})", fontsize=9)
        ax.legend(fontsize=7, loc="upper right", frameon=False)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        save_svg(fig, path)
        plt.close(fig)
    return ar, diff, text
