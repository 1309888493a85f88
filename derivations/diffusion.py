"""Regenerate the `diffusion` family of proofs (Baptista, Stuart & Tran §9, App. D; Austin et
al. 2021; Campbell et al. 2022; Shi et al. 2024; Sahoo et al. 2024): the masked forward
process (Chapman-Kolmogorov, its rate matrix), the time reversal of a finite-state Markov
chain (reverse rates Q(y, x) p(y)/p(x)), the two-point posterior of the masked process, the
per-step KL of the discrete-time ELBO as a weighted cross-entropy, and the continuous-time
ELBO as the limit of the discrete one (schedule-invariant, Beta weights), each proved on the
functions of :mod:`nlaverify.diffusion` run with SymPy symbols.

Figure: ``docs/figures/diffusion.svg``: the tiny model trained autoregressively and as a
masked-diffusion model (:mod:`nlaverify.diffusion_train`) on the passage, held-out
cross-entropy against the negative ELBO, bits per character, with a diffusion sample. The
derivations live in :mod:`nlaverify.identities.diffusion`. Run from the repository root:
``python derivations/diffusion.py [--check] [--figure-only]``.
"""

from __future__ import annotations

import sys

import nlaverify.identities.diffusion  # noqa: F401  (registers the family)
from nlaverify.proofs import family_script

FIGURE = "docs/figures/diffusion.svg"


def draw() -> None:
    from nlaverify.diffusion_train import draw_comparison

    ar, diff, text = draw_comparison(FIGURE)
    print(f"held-out after {diff.steps} steps: autoregressive {ar.val_losses[-1]:.3f}, "
          f"diffusion bound {diff.val_nelbo[-1]:.3f} nats/char; sample {text!r}",
          file=sys.stderr)
    print(f"wrote {FIGURE}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(family_script("diffusion", draw, sys.argv[1:], __doc__ or ""))
