"""The data of the committed figures, at reduced sizes, saved bit for bit (run as a program).

``python tests/_figure_data.py OUT.npz`` pins the kernels (:func:`nlaverify.reproducible.
pin_process`, as the figure commands do), then computes, through the same library functions
the figures use: the pairwise-angle statistics (NumPy and OpenBLAS: ``angles.svg``), a
Johnson–Lindenstrauss distortion curve (``jl_distortion.svg``), a training run of ``tiny``
with AdamW and with Muon (XLA: ``training.svg``), a LoRA and a random-subspace fine-tuning
run from it (``lora_finetune.svg``) and a gradient's singular values
(``gradient_energy.svg``); everything goes to ``OUT.npz``. ``tests/test_figures.py`` runs it
under different environments and compares the files byte for byte. With
``NLAVERIFY_UNPINNED_NUMERICS=1`` nothing is pinned: the control runs.
"""

from __future__ import annotations

import sys


def main(out: str) -> int:
    from nlaverify.reproducible import pin_process

    pin_process()
    import numpy as np

    from nlaverify import finetune as F
    from nlaverify.geometry import angles as an
    from nlaverify.geometry.figures import jl_curves
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params
    from nlaverify.train import char_config, load_corpus, train, window_starts, windows

    data: dict[str, np.ndarray] = {}
    X = an.random_unit_vectors(0, 1500, 3072, dtype=np.float32)
    st = an.angle_statistics(X, edges_degrees=np.linspace(86.0, 94.0, 161), block=500)
    data["angle_counts"] = st.counts
    data["angle_moments"] = np.array([st.in_band, st.sum_c2, st.sum_c4], dtype=np.float64)
    jl = jl_curves(n=60, d=512, ks=(32, 128), reps=2)
    data["jl"] = np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in
                                 [*(jl.measured[k] for k in sorted(jl.measured)), jl.dg_eps]])
    corpus = load_corpus()
    for opt in ("adamw", "muon"):
        r = train("tiny", opt, 12, batch=4, seed=0, eval_every=6, corpus=corpus)
        data[f"train_{opt}"] = np.concatenate([r.losses, r.val_losses])
    cfg = char_config("tiny", corpus.vocab_size)
    base = train(cfg, "adamw", 8, batch=4, seed=0, corpus=corpus).params
    task = F.reversed_corpus(corpus)
    lora = F.lora_finetune(cfg, base, task, 6, 2, ("q", "v"), batch=4)
    sub = F.subspace_finetune(cfg, base, task, 6, 64, batch=4)
    data["lora"] = np.asarray(lora.val_losses, dtype=np.float64)
    data["subspace"] = np.asarray(sub.val_losses, dtype=np.float64)
    window = windows(corpus.train, window_starts(len(corpus.train), 1, 4, 16, 0)[0], 16)
    spectra = F.gradient_spectra(cfg, init_params(build_transformer(cfg), 0), window)
    data["spectra"] = np.concatenate([np.asarray(s, dtype=np.float64)
                                      for _, s in sorted(spectra.items())])
    np.savez(out, **data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
