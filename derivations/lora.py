"""Regenerate the LoRA proofs of the ``lowrank`` family and the fine-tuning figures (Baggag
& Saad §3.14, §4.1, §4.2).

Proofs (:mod:`nlaverify.identities.lora`; the ops' VJPs are in ``jacobians``): merged and
unmerged adapters agree, B = 0 leaves the model unchanged, rank(AB) <= r, trainable counts.
Figures, measured on the graph-lowered Transformer (:mod:`nlaverify.finetune`):

* ``docs/figures/lora_finetune.svg``: ``tiny`` pre-trained on the shipped passage, then
  fine-tuned on the passage read backwards — full fine-tuning, LoRA of rank 1, 2, 4, 8 on
  every projection, and training in random subspaces of dimension 16..2048 (the intrinsic
  dimension d90 of Li et al. 2018): held-out loss against trained parameters;
* ``docs/figures/gradient_energy.svg``: the share of each weight gradient's Frobenius energy
  in its leading singular values, ``mid`` at initialisation on 8 x 64 characters.

Run from the repository root: ``python derivations/lora.py [--check] [--figure-only]``
(the figures take about two minutes on two cores).
"""

from __future__ import annotations

import sys

import nlaverify.identities.lora  # noqa: F401  (registers the LoRA identities)
from nlaverify.proofs import family_script

FIGURES = "docs/figures"


def draw() -> None:
    from nlaverify import finetune as F
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params
    from nlaverify.train import char_config, load_corpus, window_starts, windows

    study = F.finetune_study()
    print("\n".join(study.lines()))
    path = F.draw_finetune(study.full, study.lora, study.subspace, study.pretrained_loss,
                           f"{FIGURES}/lora_finetune.svg")
    print(f"wrote {path}", file=sys.stderr)
    corpus = load_corpus()
    cfg = char_config("mid", corpus.vocab_size)
    data = windows(corpus.train, window_starts(len(corpus.train), 1, 8, 64, 0)[0], 64)
    spectra = F.gradient_spectra(cfg, init_params(build_transformer(cfg), 0), data)
    ranks = {k: F.energy_rank(s, 0.9) for k, s in spectra.items()}
    print("rank holding 90 % of the gradient energy (mid, initialisation, 512 tokens): "
          + ", ".join(f"{k.split('.', 3)[-1]}@{k.split('.')[1]} {v}" for k, v in ranks.items()))
    path = F.draw_gradient_spectra(spectra, f"{FIGURES}/gradient_energy.svg",
                                   "mid at initialisation, 8 x 64 characters: weight gradients "
                                   "are nearly low rank")
    print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str]) -> int:
    return family_script("lowrank", draw, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
