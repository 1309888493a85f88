"""The commands of the ``nlaverify`` command line (:mod:`nlaverify.cli`): one function
``_cmd_<name>(args) -> exit code`` per subcommand, run on the parsed arguments of
:func:`nlaverify.cli.build_parser`, and the helpers they share (where the proof documents are,
a progress bar on stderr, the checks of ``verify``'s options)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nlaverify import jsonout
from nlaverify.commands_params import _cmd_params, _parse_lora  # noqa: F401 (the CLI's)
from nlaverify.errors import ArgumentError, UnknownNameError


def checkout_proofs() -> Path | None:
    """The ``docs/proofs`` folder of the checkout the package runs from (an editable
    install or a source tree), or ``None`` when the package is installed elsewhere."""
    import nlaverify

    root = Path(nlaverify.__file__).resolve().parents[1] / "docs" / "proofs"
    return root if (root / "index.json").is_file() else None


def _proof_root(args: argparse.Namespace, command: str) -> Path:
    """``--root`` when given; else the checkout's proof folder (whatever the current folder);
    else an error that says so (nothing is created in the current folder)."""
    if args.root is not None:
        root = Path(args.root)
        if command == "derive" and not args.check:
            from nlaverify.outputs import probe_folder

            probe_folder(root, "--root", command)
        elif not (root / "index.json").is_file():
            raise ArgumentError(f"{command}: --root {args.root!r} holds no proofs (no "
                                "index.json there)")
        return root
    found = checkout_proofs()
    if found is None:
        raise ArgumentError(f"{command}: no proof documents: nlaverify is not running from a "
                            "checkout of its repository (docs/proofs/index.json next to the "
                            "package); pass --root DIR to read or write them elsewhere")
    return found


def _cmd_derive(args: argparse.Namespace) -> int:
    from nlaverify.proofs import derive

    return derive(args.ids, check=args.check, root=_proof_root(args, "derive"), jobs=args.jobs,
                  everything=args.everything)


def _cmd_list(args: argparse.Namespace) -> int:
    from nlaverify.identities import load_catalogue
    from nlaverify.proofs import read_index

    catalogue = load_catalogue()
    index = read_index(_proof_root(args, "list"))
    rows = [{"id": i, "family": x.family, "title": x.title, "seed": x.seed,
             "statement": x.statement, "certifies": list(x.certifies),
             "status": index.get(i, {}).get("verdict", "not derived")}
            for i, x in catalogue.items()]
    if args.json:
        jsonout.dump(rows)
        return 0
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        print(f"{r['id']:<{width}}  {r['status']:<11}  {r['family']:<10}  {r['seed']}")
    print(f"{len(rows)} identities")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from nlaverify.crosscheck import format_summary, run_crosscheck

    backends = list(dict.fromkeys(b.strip() for b in args.backends.split(",") if b.strip()))
    _check_verify_args(args, backends)
    if args.seq_len is None and args.mesh is None:
        args.seq_len = 6
    if args.hf is not None:
        from nlaverify.interop.hf_verify import hf_verify_command

        extra = {} if args.max_params is None else {"max_params": args.max_params}
        return hf_verify_command(args.hf, seq_len=args.seq_len, seed=args.seed,
                                 exact=args.hf_exact, as_json=args.json, **extra)
    if args.zoo:
        from nlaverify.zoo import run_zoo_command

        return run_zoo_command(backends, seed=args.seed, n=args.seq_len, digits=args.digits,
                               batch=args.batch, as_json=args.json, jobs=args.jobs)
    if args.mesh is not None:
        return _verify_mesh(args)
    if args.preset and args.dtype != "float64":
        from nlaverify.precision import precision_command

        return precision_command(args.preset, args.dtype, backends, seed=args.seed,
                                 n=args.seq_len, as_json=args.json, batch=args.batch)
    if args.preset:
        from nlaverify.config import preset
        from nlaverify.pipeline import format_report, verify_pipeline

        rep = verify_pipeline(preset(args.preset), backends, seed=args.seed, n=args.seq_len,
                              digits=args.digits, batch=args.batch)
        if args.json:
            jsonout.dump(rep.as_dict())
        else:
            print(format_report(rep))
        return 0 if rep.ok else 1
    with _progress("verify") as tick:
        report = run_crosscheck(backends=backends, seed=args.seed, digits=args.digits,
                                ops=_ops_of(args.op), progress=tick)
    if args.json:
        jsonout.dump(report.as_dict())
    else:
        print(format_summary(report))
    return 0 if report.ok else 1


def _verify_mesh(args: argparse.Namespace) -> int:
    """``verify --preset NAME --mesh SPEC``: the sharded run against the unsharded one."""
    from nlaverify.config import preset
    from nlaverify.shard.command import format_report, run_shard_verify

    rep = run_shard_verify(preset(args.preset), args.mesh, seq_len=args.seq_len,
                           batch=args.batch, seed=args.seed)
    if args.json:
        jsonout.dump(rep.as_dict())
    else:
        print(format_report(rep))
    return 0 if rep.ok else 1


@contextlib.contextmanager
def _progress(command: str) -> Iterator[Callable[[int, int, str], None]]:
    """A progress callback ``tick(k, total, stage)`` on stderr: a tqdm bar on a terminal,
    one line per stage otherwise (a log, CI)."""
    bar: list[Any] = []

    def tick(k: int, total: int, stage: str) -> None:
        if sys.stderr.isatty():
            if not bar:
                from tqdm import tqdm

                bar.append(tqdm(total=total, desc=command, file=sys.stderr, leave=False))
            bar[0].set_postfix_str(stage)
            bar[0].update(1)
        else:
            print(f"{command}: [{k}/{total}] {stage}", file=sys.stderr, flush=True)

    try:
        yield tick
    finally:
        if bar:
            bar[0].close()


def _ops_of(names: list[str] | None) -> list[str] | None:
    """The ops of ``--op`` (repeated or comma-separated), each a known differentiable op."""
    if not names:
        return None
    from nlaverify.ops.registry import OPS

    ops = list(dict.fromkeys(n.strip() for item in names for n in item.split(",") if n.strip()))
    for name in ops:
        if name not in OPS:
            raise UnknownNameError(f"verify: --op: unknown op {name!r}: expected one of "
                                   f"{', '.join(sorted(OPS))}")
        if not OPS[name].differentiable:
            raise ArgumentError(f"verify: --op: {name!r} has no real argument: nothing to "
                                "cross-check")
    return ops


def _check_verify_args(args: argparse.Namespace, backends: list[str]) -> None:
    """Backends known and at least one; no option that the chosen mode would ignore."""
    known = ("numpy", "jax", "mpmath", "cupy", "strict")
    unknown = [b for b in backends if b not in known]
    if unknown:
        raise UnknownNameError(f"verify: unknown backend {unknown[0]!r}: expected some of "
                               f"{', '.join(sorted(known))}")
    if not backends:
        raise ArgumentError("verify: --backends: expected at least one backend, got none")
    if args.hf is not None and (args.zoo or args.preset or args.dtype != "float64"
                                or args.batch is not None or args.mesh is not None):
        raise ArgumentError("verify: --hf runs the Hugging Face model (in float64, its weights "
                            "cast) on one sequence, unsharded: drop --zoo, --preset, --dtype, "
                            "--batch and --mesh")
    if args.op and (args.hf is not None or args.zoo or args.preset):
        raise ArgumentError("verify: --op selects ops of the op cross-check: drop --hf, --zoo "
                            "and --preset")
    if (args.hf_exact or args.max_params is not None) and args.hf is None:
        raise ArgumentError("verify: --hf-exact and --max-params apply to --hf")
    if args.mesh is not None and (not args.preset or args.dtype != "float64"):
        raise ArgumentError("verify: --mesh shards the pipeline of a --preset, in float64: give "
                            "--preset NAME (and drop --dtype)")
    if args.mesh is not None and args.backends != "numpy,jax,mpmath":
        raise ArgumentError("verify: --mesh runs the graph on JAX's simulated devices against "
                            "the unsharded JAX run: drop --backends")
    if args.jobs is not None and not args.zoo:
        raise ArgumentError("verify: --jobs applies to --zoo (its members run in parallel)")
    if args.zoo and (args.preset or args.dtype != "float64"):
        raise ArgumentError("verify: --zoo runs its own configs in float64: drop --preset and "
                            "--dtype")
    if not (args.zoo or args.preset or args.hf):
        given = [f for f, v in (("--dtype", args.dtype != "float64"),
                                ("--seq-len", args.seq_len is not None),
                                ("--batch", args.batch is not None)) if v]
        if given:
            raise ArgumentError(f"verify: {given[0]} applies to --preset or --zoo (the op "
                                "cross-check runs one seeded case per op)")


def _cmd_scaling(args: argparse.Namespace) -> int:
    """``nlaverify scaling --budget C``: N*, D*, tokens per parameter and the predicted loss
    of each published Chinchilla fit (:func:`nlaverify.scaling.compute_optimal`, proved by
    ``chinchilla_compute_optimal``)."""
    from nlaverify.errors import UnknownNameError
    from nlaverify.scaling import LAWS, compute_optimal

    if args.law != "all" and args.law not in LAWS:
        raise UnknownNameError(f"scaling: unknown law {args.law!r}: expected all or one of "
                               f"{', '.join(LAWS)}")
    names = list(LAWS) if args.law == "all" else [args.law]
    rows = []
    for name in names:
        law = LAWS[name]
        n, d = compute_optimal(args.budget, law)
        rows.append({"law": name, "source": law.source, "budget_flops": args.budget,
                     "params": n, "tokens": d, "tokens_per_param": d / n,
                     "loss": law.loss(n, d)})
    if args.json:
        jsonout.dump({"rows": rows})
        return 0
    print(f"compute-optimal allocation at C = {args.budget:.3g} FLOPs (C = 6ND; "
          "proof: chinchilla_compute_optimal)")
    for r in rows:
        print(f"  {r['law']:<14} N* = {r['params']:.3g}  D* = {r['tokens']:.3g}  "
              f"D*/N* = {r['tokens_per_param']:.3g}  L = {r['loss']:.4g}  ({r['source']})")
    return 0


def _cmd_tokenize(args: argparse.Namespace) -> int:
    """``nlaverify tokenize train|encode|decode`` (:mod:`nlaverify.tokenize`)."""
    from nlaverify.tokenize import BPE, train_bpe

    if args.action == "train":
        if args.input is not None:
            raise ArgumentError("tokenize train: --input is for encode and decode (train "
                                "reads --text FILE)")
        if args.text is None:
            from importlib import resources

            text = (resources.files("nlaverify") / "data" / "baggag_saad.txt").read_text(
                encoding="utf-8")
        else:
            try:
                with open(args.text, encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise ArgumentError(f"tokenize train: --text {args.text!r}: {exc}") from exc
        from nlaverify.outputs import probe_output

        probe_output(args.merges, "--merges", "tokenize train")
        bpe = train_bpe(text, args.vocab_size)
        bpe.save(args.merges)
        print(f"{len(bpe.merges)} merges ({len(bpe.vocab)} tokens) written to {args.merges}")
        return 0
    if args.input is None:
        raise ArgumentError(f"tokenize {args.action}: expected --input (a text for encode, "
                            "comma-separated ids for decode)")
    bpe = BPE.load(args.merges)
    if args.action == "encode":
        print(",".join(str(i) for i in bpe.encode(args.input)))
        return 0
    try:
        ids = [int(x) for x in args.input.split(",") if x.strip()]
    except ValueError as exc:
        raise ArgumentError(f"tokenize decode: expected comma-separated integers, got "
                            f"{args.input!r}") from exc
    print(bpe.decode(ids).decode("utf-8", errors="replace"))
    return 0


def _cmd_curvature(args: argparse.Namespace) -> int:
    from nlaverify.curvature.report import curvature_report, format_report

    with _progress("curvature") as tick:
        rep = curvature_report(args.preset, block=args.block, seed=args.seed, n=args.seq_len,
                               batch=args.batch, top=args.top, progress=tick)
    if args.json:
        jsonout.dump(rep.as_dict())
    else:
        print(format_report(rep))
    return 0


def _cmd_newton_schulz(args: argparse.Namespace) -> int:
    from fractions import Fraction

    from nlaverify.optim.certify import absorbing_interval, fixed_points
    from nlaverify.optim.designer import compare, format_comparison
    from nlaverify.optim.newton_schulz import COEFFICIENT_SETS, odd_polynomial

    rows = compare(args.steps, args.lower, args.degree)
    dynamics = {}
    for name, coeffs in COEFFICIENT_SETS.items():
        absorbing = absorbing_interval(coeffs, lower=Fraction(args.lower))
        dynamics[name] = {
            "p(1)": float(odd_polynomial(coeffs, Fraction(1))),
            "fixed_points": [{"x": f.value.mid, "x_enclosure": [f.value.lo, f.value.hi],
                              "derivative": f.derivative.mid, "stable": f.stable}
                             for f in fixed_points(coeffs)],
            "absorbing": [absorbing.lo, absorbing.hi, absorbing.entered_after]}
    if args.json:
        jsonout.dump({"steps": args.steps, "lower": args.lower, "degree": args.degree,
                      "comparison": rows, "dynamics": dynamics})
        return 0
    print(f"certified range of every singular value after {args.steps} steps from "
          f"[{args.lower:g}, 1] (exact root isolation + arb balls, rounded outward):")
    print(format_comparison(rows))
    for name, d in dynamics.items():
        word = {True: "attracting", False: "repelling", None: "undecided"}
        fps = ", ".join(f"{f['x']:.6g} ({word[f['stable']]}, "
                        f"p'={f['derivative']:.4g})" for f in d["fixed_points"])
        lo, hi, n = d["absorbing"]
        print(f"{name:<8} p(1) = {d['p(1)']:.6g}; fixed points {fps}; "
              f"absorbing [{lo:.6g}, {hi:.6g}] entered after {n} steps")
    return 0


def _train_diffusion(args: argparse.Namespace) -> int:
    """``nlaverify train --objective diffusion`` (:mod:`nlaverify.diffusion_train`)."""
    from nlaverify.diffusion_train import bits_per_char, sample, train_diffusion
    from nlaverify.train import load_corpus

    if args.tokenizer != "char" or args.figure or args.optimizer not in ("adamw", "all"):
        raise ArgumentError("train --objective diffusion: characters and AdamW only, no "
                            "--figure (python derivations/diffusion.py --figure-only draws it)")
    corpus = load_corpus()
    kw = {} if args.lr is None else {"lr": args.lr}
    r = train_diffusion(args.preset, args.steps, seq_len=args.seq_len, batch=args.batch,
                        seed=args.seed, eval_every=args.eval_every, corpus=corpus, **kw)
    text = corpus.decode(sample(r.config, r.params, corpus.vocab_size, r.config.context,
                                seed=args.seed))
    if args.json:
        jsonout.dump({"preset": args.preset, "objective": "diffusion", "steps": r.steps,
                      "val_steps": r.val_steps.tolist(), "heldout_nelbo": r.val_nelbo.tolist(),
                      "losses": r.losses.tolist(), "sample": text})
        return 0
    print(f"{r.config.name}: masked diffusion, {r.steps} steps; held-out negative ELBO "
          f"{r.val_nelbo[0]:.3f} -> {r.val_nelbo[-1]:.3f} nats/char "
          f"({bits_per_char(r.val_nelbo[-1]):.3f} bits/char, an upper bound), "
          f"{r.ms_per_step:.1f} ms/step; sample {text!r}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    import math

    from nlaverify.train import (
        OPTIMIZERS,
        draw_training,
        entropies,
        format_result,
        load_corpus,
        train,
    )

    if args.objective == "diffusion":
        return _train_diffusion(args)
    names = list(OPTIMIZERS) if args.optimizer == "all" else [args.optimizer]
    if args.lr is not None and len(names) > 1:
        raise ArgumentError("train: --lr applies to one optimizer; with --optimizer all each "
                            "uses its default rate")
    if args.figure and args.tokenizer != "char":
        raise ArgumentError("train: --figure draws the next-character figure; it is not drawn "
                            f"with --tokenizer {args.tokenizer}")
    if args.figure:  # before training: an unwritable figure used to lose the results
        from nlaverify.outputs import probe_output
        from nlaverify.reproducible import pin_process

        probe_output(args.figure, "--figure", "train")

        pin_process()  # the figure's losses must not depend on the machine's kernels
    if args.tokenizer == "bpe":
        from nlaverify.corpus import load_bpe_corpus

        corpus = load_bpe_corpus(args.bpe_vocab)
    else:
        corpus = load_corpus()
    progress = not args.json and sys.stderr.isatty()
    results = [train(args.preset, o, args.steps, seq_len=args.seq_len, batch=args.batch,
                     lr=args.lr, seed=args.seed, eval_every=args.eval_every, corpus=corpus,
                     progress=progress) for o in names]
    if args.figure:
        draw_training(results, args.figure, corpus)
    h1, h2 = entropies(corpus.train, corpus.vocab_size)
    levels = {"uniform_log_v": math.log(corpus.vocab_size), "unigram_entropy": h1,
              "bigram_entropy": h2}
    # bits per byte of the held-out text: comparable between characters and BPE tokens
    held_bytes = len(corpus.decode(corpus.val).encode("utf-8"))
    per_token = held_bytes / len(corpus.val)
    bpb = {r.optimizer: float(r.val_losses[-1]) / math.log(2) / per_token for r in results}
    unit = "tokens" if args.tokenizer == "bpe" else "characters"
    if args.json:
        jsonout.dump({"preset": args.preset, "tokenizer": args.tokenizer,
                      "vocab_size": corpus.vocab_size,
                      "train_tokens": len(corpus.train), "heldout_tokens": len(corpus.val),
                      "heldout_bytes_per_token": per_token, "heldout_bits_per_byte": bpb,
                      "levels": levels, "figure": args.figure,
                      "runs": [r.as_dict() for r in results]})
        return 0
    print(f"{results[0].config.name}: {len(corpus.train)} training and {len(corpus.val)} "
          f"held-out {unit}, V = {corpus.vocab_size}; log V = {levels['uniform_log_v']:.3f}, "
          f"unigram H1 = {h1:.3f}, bigram H2 = {h2:.3f} nats")
    for r in results:
        print(format_result(r) + f"  held-out {bpb[r.optimizer]:.3f} bits/byte "
              f"({per_token:.2f} bytes/token)")
    if args.figure:
        print(f"figure: {args.figure}")
    return 0


__all__ = ["checkout_proofs"]
