"""Command line: ``nlaverify derive | list | verify | params | curvature | newton-schulz |
train | scaling | cost | generate | transform | tokenize``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from nlaverify.commands import (
    _cmd_curvature,
    _cmd_derive,
    _cmd_list,
    _cmd_newton_schulz,
    _cmd_params,
    _cmd_scaling,
    _cmd_tokenize,
    _cmd_train,
    _cmd_verify,
)
from nlaverify.commands import checkout_proofs as checkout_proofs
from nlaverify.cost.command import _cmd_cost
from nlaverify.errors import NlaverifyError
from nlaverify.strategy import STRATEGIES, _cmd_generate


def _positive_float(text: str) -> float:
    """An argparse type: a finite float in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def _positive_number(text: str) -> float:
    """An argparse type: a finite float > 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``nlaverify: error: ...``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"nlaverify: error: {message}\n")


def _bounded_int(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[lo, hi]`` (``hi`` None: no upper bound)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise argparse.ArgumentTypeError(f"expected an integer {want}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nlaverify")
    except PackageNotFoundError:  # pragma: no cover - a source tree on PYTHONPATH
        from nlaverify import __version__

        return __version__


def _cmd_transform(args: argparse.Namespace) -> int:
    from nlaverify.transform.command import transform_command

    return transform_command(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = _Parser(prog="nlaverify", description=__doc__)
    p.add_argument("--version", action="version", version=f"nlaverify {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("derive", help="regenerate the proof documents (or --check them)")
    d.add_argument("ids", nargs="*", help="identity ids, always derived (default: every "
                   "identity whose recorded inputs hash, document or verdict no longer "
                   "vouches for it)")
    d.add_argument("--check", action="store_true",
                   help="write nothing; fail when a proof fails or a document is stale")
    d.add_argument("--all", action="store_true", dest="everything",
                   help="derive every identity, whatever its record says")
    d.add_argument("--root", default=None,
                   help="proof documents folder (default: docs/proofs of the checkout the "
                        "package runs from, whatever the current folder)")
    d.add_argument("--jobs", type=_bounded_int(1), default=None,
                   help="parallel processes (default: cores)")
    d.set_defaults(func=_cmd_derive)

    ls = sub.add_parser("list", help="list the identities and their status")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--root", default=None,
                    help="proof documents folder (default: the checkout's docs/proofs)")
    ls.set_defaults(func=_cmd_list)

    v = sub.add_parser("verify", help="cross-check every op on several backends")
    v.add_argument("--backends", default="numpy,jax,mpmath",
                   help="comma-separated: numpy, jax, mpmath, cupy, strict (array-api-strict on an "
                        "emulated device; default numpy,jax,mpmath)")
    v.add_argument("--seed", type=_bounded_int(0, 2**32 - 1), default=0)
    v.add_argument("--digits", type=_bounded_int(16, 10_000), default=50,
                   help="mpmath digits (16 .. 10000)")
    v.add_argument("--json", action="store_true")
    v.add_argument("--preset", default=None,
                   help="verify the whole Transformer pipeline of this preset node by node "
                        "(e.g. tiny) instead of the ops one by one")
    v.add_argument("--zoo", action="store_true",
                   help="verify every model of the zoo (nlaverify.zoo: every config field "
                        "exercised) node by node; one line each, then 'zoo: N passed, N failed'")
    v.add_argument("--jobs", type=_bounded_int(1), default=None,
                   help="for --zoo: verify the members in this many processes (default: cores)")
    v.add_argument("--seq-len", type=_bounded_int(1), default=None,
                   help="sequence length for --preset or --zoo (1 .. the preset's context; "
                        "default 6)")
    v.add_argument("--batch", type=_bounded_int(1), default=None,
                   help="for --preset: this many right-padded sequences (default: one, unbatched)")
    v.add_argument("--dtype", choices=("float64", "float32", "bfloat16"), default="float64",
                   help="for --preset: run the graph in this precision and compare every node "
                        "with float64 autodiff under the tolerance model (float32 on numpy "
                        "and jax, bfloat16 on jax; JAX matmuls pinned to full precision)")
    v.add_argument("--hf", default=None, metavar="PATH_OR_CONFIG",
                   help="verify a Hugging Face model node by node against the graph: a "
                        "checkpoint folder (config.json + safetensors) or a config.json (random "
                        "weights); needs the [hf] extra (torch, transformers)")
    v.add_argument("--hf-exact", action="store_true",
                   help="with --hf: run the Hugging Face model with its float32 islands "
                        "(RMSNorm, RoPE angles, softmaxes, loss) patched to the model dtype")
    v.add_argument("--max-params", type=_bounded_int(1), default=None,
                   help="with --hf: refuse models above this many parameters (default 100M, "
                        "or NLAVERIFY_HF_MAX_PARAMS): both models, float64, and gradients")
    v.add_argument("--mesh", default=None, metavar="AXIS=N,...",
                   help="with --preset: run the graph sharded on simulated CPU devices "
                        "(axes dp, fsdp, tp, sp, e.g. dp=2,tp=2 or sp=4; vocab=tp|none) and "
                        "compare every node's value and cotangent with the unsharded run "
                        "(nlaverify.shard); batch and sequence length default to what the "
                        "mesh divides")
    v.add_argument("--op", action="append", default=None, metavar="NAME",
                   help="cross-check only this op (repeatable, or comma-separated; the names of "
                        "nlaverify.ops.registry.OPS)")
    v.set_defaults(func=_cmd_verify)

    pa = sub.add_parser("params", help="parameter counts of a preset or a config file, by "
                                       "component")
    pa.add_argument("--preset", default=None, help="a preset (nlaverify.config.PRESETS)")
    pa.add_argument("--config", default=None,
                    help="a Hugging Face config.json (or a checkpoint folder holding one), or a "
                         "JSON file of TransformerConfig fields")
    pa.add_argument("--lora", default=None, metavar="r=R,targets=q,v[,alpha=A]",
                    help="add LoRA adapters of rank R on these projections (q, k, v, o, mlp) "
                         "and print the trainable count")
    pa.add_argument("--json", action="store_true")
    pa.set_defaults(func=_cmd_params)

    sc = sub.add_parser("scaling", help="the compute-optimal model and data sizes of the "
                                        "Chinchilla law for a FLOP budget (C = 6ND)")
    sc.add_argument("--budget", type=_positive_number, required=True, metavar="FLOPS",
                    help="the training compute C in FLOPs (e.g. 5.76e23, Chinchilla's)")
    sc.add_argument("--law", default="all", help="a published fit of nlaverify.scaling.LAWS "
                                                 "(hoffmann2022, besiroglu2024) or all")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=_cmd_scaling)

    co = sub.add_parser("cost", help="FLOPs, bytes and memory of a preset or a config file: "
                                     "per node, component, block; against Kaplan and 6N")
    co.add_argument("--preset", default=None, help="a preset (nlaverify.config.PRESETS)")
    co.add_argument("--config", default=None,
                    help="a Hugging Face config.json (or a checkpoint folder holding one), or a "
                         "JSON file of TransformerConfig fields")
    co.add_argument("--seq-len", type=_bounded_int(1), default=None,
                    help="tokens per sequence (default: the config's context)")
    co.add_argument("--batch", type=_bounded_int(1), default=1, help="sequences per batch")
    co.add_argument("--dtype", default="float32",
                    choices=("float32", "bfloat16", "float16", "float64"),
                    help="the working dtype, for bytes")
    co.add_argument("--xla", action="store_true",
                    help="also compile the forward and report XLA's cost analysis")
    co.add_argument("--json", action="store_true")
    co.set_defaults(func=_cmd_cost)

    gn = sub.add_parser("generate", help="extend a prompt of token ids with a decoding "
                                         "strategy (greedy, temperature, top-k, top-p, min-p, "
                                         "typical, beam) on a preset with seeded weights")
    gn.add_argument("--preset", default="tiny")
    gn.add_argument("--prompt", required=True, help="comma-separated token ids, e.g. 1,5,2")
    gn.add_argument("--steps", type=_bounded_int(1), default=8, help="new tokens at most")
    gn.add_argument("--strategy", default="greedy", choices=tuple(STRATEGIES))
    gn.add_argument("--temperature", type=_positive_number, default=1.0)
    gn.add_argument("--k", type=_bounded_int(1), default=None, help="top-k's k")
    gn.add_argument("--p", type=_positive_float, default=None,
                    help="top-p's p, min-p's p_min, typical's mass (in (0, 1])")
    gn.add_argument("--repetition-penalty", type=_positive_number, default=1.0)
    gn.add_argument("--beams", type=_bounded_int(1), default=4)
    gn.add_argument("--length-penalty", type=float, default=1.0)
    gn.add_argument("--eos", type=_bounded_int(0), default=None, help="end-of-sequence id")
    gn.add_argument("--seed", type=_bounded_int(0, 2**32 - 1), default=0,
                    help="the sampling seed")
    gn.add_argument("--params-seed", type=_bounded_int(0, 2**32 - 1), default=0,
                    help="the seed of the random weights")
    gn.add_argument("--json", action="store_true")
    gn.set_defaults(func=_cmd_generate)

    tf = sub.add_parser("transform", help="weight transformations that claim to leave the "
                                          "model unchanged (fold norms, center, rotate), each "
                                          "checked node by node")
    tf.add_argument("--preset", default="tiny", help="a preset with seeded weights")
    tf.add_argument("--hf", default=None, metavar="DIR",
                    help="a Hugging Face checkpoint directory instead of a preset")
    tf.add_argument("--steps", required=True,
                    help="comma-separated: fold-norms, center-writers, center-unembedding, "
                         "fold-value-bias, rotate (Hadamard), rotate:random")
    tf.add_argument("--seed", type=_bounded_int(0, 2**32 - 1), default=0,
                    help="the weights' (preset), the data's and the random rotation's seed")
    tf.add_argument("--out", default=None, metavar="DIR",
                    help="write the transformed model there (config.json, model.safetensors) "
                         "when every check passes")
    tf.add_argument("--json", action="store_true")
    tf.set_defaults(func=_cmd_transform)

    tk = sub.add_parser("tokenize", help="byte-pair encoding: train merges on a text, encode "
                                         "a text to ids, decode ids to text")
    tk.add_argument("action", choices=("train", "encode", "decode"))
    tk.add_argument("--merges", required=True, metavar="FILE",
                    help="the merges (JSON): written by train, read by encode and decode")
    tk.add_argument("--vocab-size", type=_bounded_int(256), default=512,
                    help="for train: bytes + merges (default 512)")
    tk.add_argument("--text", default=None, metavar="FILE",
                    help="for train: the training text (default: the shipped passage)")
    tk.add_argument("--input", default=None,
                    help="for encode: the text; for decode: the ids, comma-separated")
    tk.set_defaults(func=_cmd_tokenize)

    c = sub.add_parser("curvature", help="per block: top eigenvalues of Hessian, GGN, Fisher, "
                                         "empirical Fisher; K-FAC error against the exact GGN")
    c.add_argument("--preset", required=True, help="a preset small enough for dense layer "
                                                   "blocks (e.g. tiny)")
    c.add_argument("--block", type=_bounded_int(0), default=None,
                   help="only this Transformer block (default: every block)")
    c.add_argument("--seed", type=_bounded_int(0, 2**32 - 1), default=0)
    c.add_argument("--seq-len", type=_bounded_int(1), default=6)
    c.add_argument("--batch", type=_bounded_int(1), default=None,
                   help="this many right-padded sequences (default: one)")
    c.add_argument("--top", type=_bounded_int(1, 50), default=3, help="eigenvalues per matrix")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_curvature)

    ns = sub.add_parser("newton-schulz", help="certified singular-value ranges of Muon's, the "
                                              "cubic, the quintic and a designed schedule")
    ns.add_argument("--steps", type=_bounded_int(1, 20), default=5)
    ns.add_argument("--lower", type=_positive_float, default=1e-3,
                    help="the smallest singular value ε of the normalised input (default 1e-3)")
    ns.add_argument("--degree", type=_bounded_int(3, 9), default=5,
                    help="odd degree of the designed polynomials")
    ns.add_argument("--json", action="store_true")
    ns.set_defaults(func=_cmd_newton_schulz)

    t = sub.add_parser("train", help="train the graph-lowered Transformer on next-character "
                                     "prediction over the shipped seed-paper passage")
    t.add_argument("--preset", default="tiny",
                   help="a preset, its vocabulary resized to the text's characters")
    t.add_argument("--optimizer", choices=("sgd", "adamw", "muon", "all"), default="all",
                   help="the update rule (nlaverify.optim.rules); all: the three in turn")
    t.add_argument("--steps", type=_bounded_int(1), required=True,
                   help="optimizer steps (each on --batch fresh random windows)")
    t.add_argument("--seq-len", type=_bounded_int(1), default=None,
                   help="characters per window (default: the preset's context)")
    t.add_argument("--batch", type=_bounded_int(1), default=16, help="windows per step")
    t.add_argument("--lr", type=float, default=None,
                   help="learning rate (default per optimizer, nlaverify.train.DEFAULT_LR: sgd "
                        "1.0, adamw 0.03, muon 0.02 with an AdamW 0.03 fallback)")
    t.add_argument("--seed", type=_bounded_int(0, 2**32 - 1), default=0,
                   help="seeds the initial parameters and the windows")
    t.add_argument("--eval-every", type=_bounded_int(1), default=None,
                   help="held-out loss every this many steps (default: steps // 20)")
    t.add_argument("--figure", default=None,
                   help="write the loss curves to this SVG (e.g. docs/figures/training.svg)")
    t.add_argument("--objective", choices=("ar", "diffusion"), default="ar",
                   help="next-token cross-entropy (default), or a masked-diffusion model "
                        "(bidirectional, the continuous-time negative ELBO; AdamW)")
    t.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                   help="characters (default), or byte-pair tokens learned on the training "
                        "split (nlaverify.tokenize)")
    t.add_argument("--bpe-vocab", type=_bounded_int(257), default=384,
                   help="the byte-pair vocabulary: 256 bytes and BPE_VOCAB - 256 merges")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=_cmd_train)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nlaverify`` command."""
    if argv is None and "jax" not in sys.modules:
        persistent_jax_cache()
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
    except NlaverifyError as exc:
        print(f"nlaverify: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's code for SIGINT
        print("nlaverify: interrupted", file=sys.stderr)
        return 130
    if argv is None:  # the command itself, not a call from Python (tests, notebooks)
        _late_interrupt_exits_130()
    return code


def persistent_jax_cache(environ: dict[str, str] | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache for this command (before JAX is
    imported), in ``$XDG_CACHE_HOME/nlaverify/jax`` (``~/.cache/nlaverify/jax``): a second
    ``nlaverify curvature`` or ``verify`` reads its compiled programs instead of compiling
    them again. Left alone where the user configured one (``JAX_COMPILATION_CACHE_DIR``) or
    turned it off (``NLAVERIFY_JAX_CACHE=0``). Returns the folder in use, or ``None``."""
    import os

    env = os.environ if environ is None else environ
    if env.get("NLAVERIFY_JAX_CACHE", "1") == "0":
        return None
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return env["JAX_COMPILATION_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "nlaverify", "jax")
    env["JAX_COMPILATION_CACHE_DIR"] = folder
    # every program, however quick to compile: a command compiles many small ones
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return folder


def _late_interrupt_exits_130() -> None:
    """After the work: a Ctrl-C during the interpreter's shutdown (joining a process
    pool's threads) prints the same line and exits 130 at once, instead of a
    ``KeyboardInterrupt`` that Python turns into a death by SIGINT (exit -2)."""
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        sys.stderr.write("nlaverify: interrupted\n")
        sys.stderr.flush()
        os._exit(130)

    signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":
    raise SystemExit(main())
