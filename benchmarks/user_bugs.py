r"""Measure ``nlaverify.check`` like a user would: realistic kernel bugs, killed or not.

Run as ``python benchmarks/user_bugs.py [--seeds N] [--quick] [--write]``.

For every kernel of :data:`_user_kernels.KERNELS` (PyTorch and JAX, in float32 and
bfloat16; two long reductions in float16) the script measures

* the **kill rate**: the buggy version checked once per dtype (seed 0, ``examples=3``,
  ``hostile=1``: a user's first call); a kill records the failing check, the argument or
  node and entry (``first_failure.where``) and the ratio error / bound, and whether the
  report's diagnosis names the bug (the kernel's ``named`` words in a "diagnosis:" note or
  a "your forward follows" convention note: **named**; another name: **wrong**);
* the **false-alarm rate**: the correct version over ``--seeds`` seeds per dtype (goal 0),
  ``examples=2`` drawn cases per seed (hypothesis draws the minimal case first, then random
  ones from the seed), and the hostile cases (they do not depend on ``seed=``) once, all 4
  of them, at seed 0;
* side by side, ``torch.autograd.gradcheck`` (float64, as it requires) and
  ``jax.test_util.check_grads`` (``order=1, modes=("rev",)``: a ``custom_vjp`` has no
  forward mode) on float64 standard-normal inputs of the same kernels, correct and buggy.
  They test the consistency of a backward with its forward only.

The bounds are the tolerance model's (:func:`nlaverify.tolerance.tolerance`), as
``check_op`` documents; nothing here sets a tolerance. Results: a table on stdout, and with
``--write`` in ``benchmarks/user_bugs.md``. XLA's persistent compilation cache (a temporary
directory) makes a second run of the JAX kernels faster; it does not change what runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _user_kernels as uk
from _peers import assert_close_verdict, flash_rule_verdict, gradcheck_verdict
from _timing import progress, publish

OUT = Path(__file__).resolve().parent / "user_bugs.md"
KILL = {"examples": 3, "hostile": 1}
SWEEP = {"examples": 2, "hostile_at_seed_0": 4}
#: (kernel, framework, call, bug) of calls that may not have landed: a row "not run"
NOT_LANDED: list[tuple[str, str, str, str]] = []
#: seeds of the float16 long reductions (4096-long mpmath references: slow; float16 is
#: outside the float32/bfloat16 false-alarm goal)
FP16_SEEDS = 10


# -- one check --------------------------------------------------------------------------


def kfac_a_factor(xp: Any, A: Any, G: Any) -> Any:
    """The reference of the K-FAC kernel: the input factor of
    :func:`nlaverify.curvature.kfac.kfac_factors` (expand mode, Baggag & Saad §5.3)."""
    from nlaverify.curvature.kfac import kfac_factors

    return kfac_factors(xp, A, G)[0]


def _optimizer_setup(k: uk.Kernel, seed: int) -> dict[str, Any]:
    if k.target == "adamw":
        return {"rule": ("adamw", dict(k.options.get("hyper", uk.ADAMW))),
                "init": uk.adamw_init_torch}
    rng = np.random.default_rng(seed)
    params = {n: rng.standard_normal(s) for n, s in uk.MUON_SHAPES.items()}
    hyper = dict(uk.MUON)
    hyper["ns_coeffs"] = uk.MUON_COEFFS
    setup: dict[str, Any] = {"rule": ("muon", hyper), "params": params}
    scale = k.options.get("grad_scale")
    if scale:  # gradients whose moment has singular values past Newton-Schulz's basin
        setup["grads"] = [{n: scale * rng.standard_normal(s) for n, s in uk.MUON_SHAPES.items()}
                          for _ in range(5)]
    return setup


def run_check(k: uk.Kernel, version: str, dtype: str, seed: int, examples: int,
              hostile: int) -> Any:
    """The report of ``nlaverify.check``'s call for kernel ``k`` (``version`` "correct" or
    "buggy") in ``dtype``."""
    from nlaverify import check

    fn = getattr(k, version)
    name = f"{fn.__name__}"
    if k.call == "check_op":
        return check.check_op(fn, k.target, dtype=dtype, framework=k.framework, seed=seed,
                              examples=examples, hostile=hostile, name=name, **k.options)
    if k.call == "check_optimizer":
        return check.check_optimizer(fn, framework=k.framework, dtype=dtype, seed=seed,
                                     **_optimizer_setup(k, seed))
    if k.call == "check_function":
        rng = np.random.default_rng(seed)
        A, G = rng.standard_normal((2, 3, 4)), rng.standard_normal((1, 2, 3, 3))

        def a_factor(A: Any, G: Any) -> Any:
            return fn(A, G)[0]

        a_factor.__name__ = name
        return check.check_function(a_factor, kfac_a_factor, inputs=(A, G), dtype=dtype,
                                    framework=k.framework)
    if k.call == "check_decode":
        from nlaverify.graph.build import build_transformer
        from nlaverify.graph.run import init_params

        cfg = uk.decode_config()
        params = init_params(build_transformer(cfg), seed=seed)
        tokens = np.random.default_rng(seed).integers(0, cfg.vocab_size, 8)
        step, cache = fn(params, dtype)
        step.__name__ = name
        return check.check_decode(step, cfg, params, tokens, cache_factory=cache, prefill=3,
                                  framework=k.framework, dtype=dtype)
    raise ValueError(f"unknown call {k.call!r}")


def diagnosis_of(report: Any) -> str:
    """The report's diagnosis: its 'diagnosis:' notes and the conventions it says the
    kernel follows."""
    return " | ".join(n for n in report.notes
                      if n.startswith("diagnosis:") or "your forward follows" in n)


def diagnosis_verdict(k: uk.Kernel, report: Any) -> str:
    """``named`` (the diagnosis holds ``k.named``), ``wrong: ...`` (it names another
    mistake), or ``""`` (none, or nothing failed)."""
    said = diagnosis_of(report)
    if not report.failures or not said:
        return ""
    if k.named and k.named in said:
        return "named"
    return "wrong: " + said[:120]


def where_of(report: Any) -> str:
    row = report.first_failure
    if row is None:
        return ""
    ratio = row.ratio
    r = "inf" if math.isinf(ratio) else ("nan" if math.isnan(ratio) else f"{ratio:.3g}")
    return f"{row.check}: {row.where} ({r})"


# -- gradcheck and check_grads ----------------------------------------------------------


# -- the benchmark ------------------------------------------------------------------------


@dataclass
class Result:
    kernel: uk.Kernel
    kills: dict[str, str] = field(default_factory=dict)  # dtype -> where, "" if survived
    killed: dict[str, bool] = field(default_factory=dict)
    #: dtype -> the buggy version's report was inconclusive (nothing failed, rows that
    #: could not resolve the check): not a kill, not a pass
    undecided: dict[str, bool] = field(default_factory=dict)
    alarms: dict[str, tuple[int, int, float, str]] = field(default_factory=dict)
    #: dtype -> seed runs of the correct version with inconclusive rows (and no failure)
    inconclusive: dict[str, int] = field(default_factory=dict)
    #: dtype -> "named" (the diagnosis holds the kernel's ``named`` words), "wrong: ..." (it
    #: names something else), "" (no diagnosis)
    diagnosis: dict[str, str] = field(default_factory=dict)
    grad: tuple[str, str] | None = None  # (correct, buggy)
    #: dtype -> (assert_close on the buggy version, false alarms of the correct one over the
    #: seeds, seeds)
    close: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    #: dtype -> FlashAttention's rule (:func:`flash_rule_verdict`) on the buggy version, its
    #: false alarms on the correct one over the seeds, seeds
    flash: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    seconds: float = 0.0


def measure(k: uk.Kernel, seeds: int, quick: bool) -> Result:
    t0 = time.perf_counter()
    res = Result(k)
    for dtype in k.dtypes:
        t1 = time.perf_counter()
        rep = run_check(k, "buggy", dtype, 0, **KILL)
        res.killed[dtype] = bool(rep.failures)
        res.diagnosis[dtype] = diagnosis_verdict(k, rep)
        res.undecided[dtype] = not rep.failures and bool(rep.inconclusive)
        took = f"{time.perf_counter() - t1:.1f} s"
        res.kills[dtype] = (f"{where_of(rep)}, {took}" if rep.failures else
                            f"{len(rep.inconclusive)} inconclusive rows, {took}"
                            if res.undecided[dtype] else
                            f"max ratio {rep.worst_ratio:.2g}, {took}")
        n_seeds = min(seeds, FP16_SEEDS) if dtype == "float16" else seeds
        fails, worst, first, undecided = 0, 0.0, "", 0
        for s in range(n_seeds):
            hostile = SWEEP["hostile_at_seed_0"] if s == 0 else 0
            rep = run_check(k, "correct", dtype, s, SWEEP["examples"], hostile)
            if rep.failures:
                fails += 1
                first = first or f"seed {s}: {where_of(rep)}"
            elif rep.inconclusive:
                undecided += 1
            worst = max(worst, rep.worst_ratio)
        res.alarms[dtype] = (fails, n_seeds, worst, first)
        res.inconclusive[dtype] = undecided
        if k.call == "check_op" and k.grad is not None:
            alarms = sum(assert_close_verdict(k, "correct", dtype, s) != "passed"
                         for s in range(n_seeds))
            res.close[dtype] = (assert_close_verdict(k, "buggy", dtype), alarms, n_seeds)
            alarms = sum(flash_rule_verdict(k, "correct", dtype, s) != "passed"
                         for s in range(n_seeds))
            res.flash[dtype] = (flash_rule_verdict(k, "buggy", dtype), alarms, n_seeds)
    if k.grad is not None and k.call == "check_op":
        res.grad = (gradcheck_verdict(k, "correct"), gradcheck_verdict(k, "buggy"))
    res.seconds = time.perf_counter() - t0
    return res


def _cell_kill(res: Result, dtype: str) -> str:
    if dtype not in res.killed:
        return "–"
    if res.killed[dtype]:
        said = res.diagnosis.get(dtype, "")
        tag = "; **named**" if said == "named" else (f"; **{said}**" if said else "")
        return f"killed: {res.kills[dtype]}{tag}"
    if res.undecided.get(dtype):
        return f"inconclusive ({res.kills[dtype]})"
    return f"**survived** ({res.kills[dtype]})"


def _cell_alarm(res: Result, dtype: str) -> str:
    if dtype not in res.alarms:
        return "–"
    fails, n, worst, first = res.alarms[dtype]
    text = f"{fails}/{n} (max ratio {worst:.2g})"
    undecided = res.inconclusive.get(dtype, 0)
    text += f"; inconclusive {undecided}/{n}" if undecided else ""
    return text + (f" first {first}" if first else "")


def table(results: list[Result], settings: str, wall: float) -> str:
    lines = ["# `nlaverify.check` on realistic user bugs", "",
             "Generated by `python benchmarks/user_bugs.py --write`; " + settings + ".", "",
             "| kernel | fw | call: reference | bug | buggy, float32 (check: where (ratio), time) "
             "| buggy, bfloat16 / float16 | false alarms, float32 | false alarms, bfloat16 / "
             "float16 | gradcheck / check_grads: correct, buggy |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        k = r.kernel
        low = "bfloat16" if "bfloat16" in k.dtypes else "float16"
        grad = f"{r.grad[0]}, {r.grad[1]}" if r.grad else "n/a (no backward to check)"
        lines.append(f"| {k.name} | {k.framework} | {k.call}: `{k.target}` | {k.bug} | "
                     f"{_cell_kill(r, 'float32')} | {_cell_kill(r, low)} | "
                     f"{_cell_alarm(r, 'float32')} | {_cell_alarm(r, low)} | {grad} |")
    from importlib.util import find_spec

    for name, fw, call, bug in NOT_LANDED:
        why = (f"{call} not landed" if find_spec(f"nlaverify.check.{call.removeprefix('check_')}")
               is None else f"{call} landed after this benchmark; no decoding loop written yet")
        lines.append(f"| {name} | {fw} | {call} | {bug} | not run: {why} | not run | not run | "
                     f"not run | n/a |")
    lines += ["", *summary(results, wall), "", *notes(results)]
    return "\n".join(lines) + "\n"


def summary(results: list[Result], wall: float) -> list[str]:
    out = []
    for group, dtypes in (("float32 and bfloat16", ("float32", "bfloat16")),
                          ("float16", ("float16",))):
        kills = [(r, d) for r in results for d in r.killed if d in dtypes]
        if not kills:
            continue
        killed = sum(r.killed[d] for r, d in kills)
        undecided = sum(r.undecided.get(d, False) for r, d in kills)
        fa = [r.alarms[d] for r in results for d in r.alarms if d in dtypes]
        seeds = sum(n for _, n, _, _ in fa)
        fails = sum(f for f, _, _, _ in fa)
        unresolved = sum(r.inconclusive.get(d, 0) for r in results for d in r.alarms
                         if d in dtypes)
        survivors = [f"{r.kernel.name} ({r.kernel.framework}, {d})" for r, d in kills
                     if not r.killed[d] and not r.undecided.get(d)]
        named = sum(r.diagnosis.get(d) == "named" for r, d in kills if r.killed[d])
        wrong = [f"{r.kernel.name} ({r.kernel.framework}, {d})" for r, d in kills
                 if r.diagnosis.get(d, "").startswith("wrong")]
        out.append(f"- **{group}**: diagnosis named {named}/{killed} kills "
                   f"({100 * named / max(killed, 1):.0f} %), wrong names {len(wrong)}"
                   + (f": {', '.join(wrong)}" if wrong else ""))
        out.append(f"- **{group}**: kill rate {killed}/{len(kills)} "
                   f"({100 * killed / len(kills):.0f} %), inconclusive {undecided}; "
                   f"false alarms {fails}/{seeds} seed runs "
                   f"({100 * fails / max(seeds, 1):.1f} %), inconclusive {unresolved}"
                   + (f"; survived: {', '.join(survivors)}" if survivors else ""))
    for group, dtypes in (("float32", ("float32",)), ("bfloat16", ("bfloat16",))):
        cl = [r.close[d] for r in results for d in r.close if d in dtypes]
        if cl:
            caught = sum(v == "caught" for v, _, _ in cl)
            alarms, runs = sum(a for _, a, _ in cl), sum(n for _, _, n in cl)
            out.append(f"- **torch.testing.assert_close** (default tolerances, {group}, the "
                       f"forward only): caught {caught}/{len(cl)} buggy kernels; false alarms "
                       f"{alarms}/{runs} seed runs of the correct ones")
        fl = [r.flash[d] for r in results for d in r.flash if d in dtypes]
        if fl:
            caught = sum(v == "caught" for v, _, _ in fl)
            errors = sum(v.startswith("error") for v, _, _ in fl)
            alarms, runs = sum(a for _, a, _ in fl), sum(n for _, _, n in fl)
            out.append(f"- **FlashAttention's rule** (error vs one precision up <= 2 x a "
                       f"naive {group} implementation's + atol; output and every cotangent; "
                       f"{group}): caught {caught}/{len(fl)} buggy kernels"
                       + (f" ({errors} could not run)" if errors else "")
                       + f"; false alarms {alarms}/{runs} seed runs of the correct ones")
    graded = [r for r in results if r.grad]
    caught = sum(r.grad[1] == "caught" for r in graded)
    false = sum(r.grad[0] != "passed" for r in graded)
    missed = [f"{r.kernel.name} ({r.kernel.framework})" for r in graded
              if r.grad[1] == "passed"]
    out.append(f"- **gradcheck / check_grads** (float64): caught {caught}/{len(graded)} buggy "
               f"kernels; flagged or failed on {false}/{len(graded)} correct ones; missed: "
               f"{', '.join(missed) or 'none'}")
    out.append(f"- wall time {wall:.0f} s on one core ({time.strftime('%Y-%m-%d')})")
    return out


def notes(results: list[Result]) -> list[str]:
    """What the survivors say about the bounds (the numbers from the tolerance model): one
    note per kernel that survived in the dtype the note explains."""
    from nlaverify.tolerance import tolerance

    t32 = tolerance("float16", size=2 * 4096, accumulation="float32").rtol
    t16 = tolerance("float16", size=2 * 4096, accumulation="float16").rtol
    bf = tolerance("bfloat16", size=16, accumulation="float32").rtol
    u16 = 2.0**-11
    text = [
        (("affine, d_in = 4096", "float16"),
         f"- *float16 running sum, affine with d_in = 4096*: `check_op(dtype='float16')` "
        f"bounds the normwise error by the tolerance model, {t32:.3g} with float32 "
        f"accumulation (the default below float32: 32 u, the output's own rounding "
        f"dominates √k u_acc). A float16 running sum of k zero-mean products errs by about "
        f"u √k relative to the output's scale (random rounding: u = {u16:.3g}, √k = 64), so "
        f"on standard-normal inputs it stays inside that bound (the ratio above): not "
        f"distinguishable from float32 accumulation at this size. Declaring "
        f"`accumulation='float16'` widens the bound to {t16:.3g} (vacuous). What float16 "
        f"accumulation really breaks is a sum that grows (positive terms: the partial sum's "
        f"ulp outgrows the terms); the RMSNorm sum of squares over d = 4096 is that case, and "
        f"it is killed."),
        (("rmsnorm autograd.Function", "bfloat16"),
         "- *RMSNorm backward with a sum for the mean, bfloat16*: the x̄ error is large (2.2 "
         "relative at seed 0) but the condition estimate of the VJP at that case "
         "(κ ≈ 25: a row of small norm, where r = 1/rms is large) lifts the bfloat16 bound "
         "to 6.1, above 1, where a normwise bound resolves nothing; seeds 3 and 5 draw "
         "better-conditioned cases and kill it (ratios 1.09, 1.99). float32 kills it "
         "(ratio 5e4)."),
        (("gelu (erf)", "bfloat16"),
         f"- *GELU tanh for erf in bfloat16*: the two differ by at most 4.7e-4 (at x ≈ ±2.7), "
        f"below the bfloat16 rounding of the output itself (bound {bf:.3g} = 32 u): no "
        f"bfloat16 test can tell them apart; float32 kills it."),
        (("AdamW step", "bfloat16"),
         "- *AdamW with coupled decay in bfloat16*: the difference per step is about "
        "η λ |w| (1e-3 here) against a bfloat16 bound of tens of u over 5 steps; "
        "`check_optimizer` documents that bfloat16 resolves only gross direction errors. "
        "float32 kills it at step 1."),
        (("Muon step", "bfloat16"),
         "- *Muon without the normalisation, default gradients*: the moment (1 - β) g has its "
        "singular values near 0.1 to 0.2, inside the Newton–Schulz basin, so the iteration still "
        "lands near the polar factor; float32 sees the difference, bfloat16 does not. With "
        "gradients 30 times larger the top singular value passes ~1.3 and the iteration "
        "diverges: killed in both dtypes at step 1."),
    ]
    survived = {(r.kernel.name, d) for r in results for d, k in r.killed.items() if not k}
    kept = list(dict.fromkeys(note for key, note in text if key in survived))
    return ["Notes on what survives:", "", *kept] if kept else []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=50, help="seeds of the false-alarm sweep")
    p.add_argument("--quick", action="store_true", help="3 seeds (a smoke run)")
    p.add_argument("--only", default="", help="kernels whose name contains this")
    p.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    a = p.parse_args(argv)
    seeds = 3 if a.quick else a.seeds
    if seeds < 1:
        p.error("--seeds: expected an integer >= 1")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    warnings.filterwarnings("ignore")
    import jax

    jax.config.update("jax_compilation_cache_dir",
                      str(Path(tempfile.gettempdir()) / "nlaverify-user-bugs-jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    t0 = time.perf_counter()
    results = []
    for k in uk.KERNELS:
        if a.only and a.only not in k.name:
            continue
        progress(f"{k.name} ({k.framework}) ...")
        results.append(measure(k, seeds, a.quick))
        progress(f"  {results[-1].seconds:.1f} s")
    settings = (f"kill: one call per dtype, seed 0, examples={KILL['examples']}, "
                f"hostile={KILL['hostile']}; false alarms: {seeds} seeds per dtype "
                f"({min(seeds, FP16_SEEDS)} in float16), examples={SWEEP['examples']} per seed, "
                f"the {SWEEP['hostile_at_seed_0']} hostile cases at seed 0; gradcheck / "
                f"check_grads once on float64 standard-normal inputs")
    text = table(results, settings, time.perf_counter() - t0)
    publish(text, OUT, a.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
