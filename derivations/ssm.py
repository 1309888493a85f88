"""Regenerate the `ssm` family of proofs (Baggag & Saad §5.3.4, Appendix C, §5.2, §5.1;
Gu & Dao 2023, Mamba; Dao & Gu 2024, Mamba-2; Peng et al. 2023, RWKV): zero-order hold
exact for piecewise-constant input (and its A -> 0 limit), Mamba's Euler-B error with its
constant, stability iff Re A < 0, the stable softplus, the LTI scan as a causal convolution,
the associative scan (every bracketing, recursive doubling, every chunk split), Mamba-2's
state-space duality (the selective scan included), RWKV-4's stable WKV, the permutation
symmetries of the set transformer, the l2 normalization and mean pooling with their VJPs
and JVPs, and the VJP and JVP of the selective scan: all proved on the running functions
of :mod:`nlaverify.ops.ssm`, :mod:`nlaverify.ops.rwkv` and :mod:`nlaverify.ops.pooling`.

The derivations live in :mod:`nlaverify.identities.ssm`,
:mod:`nlaverify.identities.ssm_duality` and :mod:`nlaverify.identities.ssm_derivatives`.
Figure: ``docs/figures/ssm.svg`` (:mod:`nlaverify.ssm_figures`): the FLOPs of the selective
scan and of causal attention against the sequence length, counted in the running code, and
the one-step error of each discretization against the exact ODE. Run from the repository
root: ``python derivations/ssm.py [--check] [--figure-only]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.ssm_derivatives  # registers the family (all three parts)
import nlaverify.identities.ssm_duality  # noqa: F401
from nlaverify.proofs import family_script

FIGURE = "docs/figures/ssm.svg"


def draw() -> None:
    from nlaverify.ssm_figures import draw_ssm_figure

    print(f"wrote {draw_ssm_figure(FIGURE)}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(family_script("ssm", draw, sys.argv[1:], __doc__ or ""))
