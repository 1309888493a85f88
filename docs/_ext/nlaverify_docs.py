"""Build-time pages of the nlaverify documentation site.

At ``builder-inited`` this extension writes two generated trees (both gitignored, never
committed):

* ``docs/api/``: one ``automodule`` page per public module of the package (every module whose
  dotted path has no part starting with ``_``), and ``api/index.rst``, which links them;
* ``docs/families/``: one page per proof family, for every ``docs/proofs/<family>.md`` that
  ``nlaverify derive`` wrote: a sentence on the family, its figures from ``docs/figures/``
  (:data:`FIGURES`), and links to the family's proof index page and to every proof page
  ``docs/proofs/<family>/<id>.md`` (orphans, see :data:`ORPHANS`).

While reading, a proof page is marked an orphan and its ``Certifies`` line is turned into
links to the API reference (:func:`link_certified`).

A file is rewritten only when its text changes, so an incremental build re-reads only what
changed. A family new to ``docs/proofs`` gets a page without a sentence or figures; a figure
of :data:`FIGURES` missing from ``docs/figures`` (or a figure there that no family names)
stops the build, so the map cannot drift from the files.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "nlaverify"

#: family -> one sentence on what its proofs are about
ABOUT: dict[str, str] = {
    "attention": "Softmax attention as Nadaraya–Watson regression, linear and kernelized "
                 "attention, random features (FAVOR+), Linformer (Baggag & Saad §2.8, §4.3, "
                 "§4.4).",
    "batching": "Padding and masking: a padded batch computes what each sequence computes "
                "alone.",
    "curvature": "Fisher, Gauss–Newton, GGN and K-FAC; natural gradient (Baggag & Saad "
                 "§5.1–5.4).",
    "geometry": "High-dimensional geometry: angles of random vectors, Johnson–Lindenstrauss "
                "(Baggag & Saad §3.14, Fig. 24, Table 5).",
    "jacobians": "Each op's VJP and JVP against the symbolic derivative of its forward.",
    "kronecker": "Kronecker-product algebra behind K-FAC and Shampoo.",
    "lowrank": "LoRA, low-rank compression, quantization and pruning (Baggag & Saad §3.14, "
               "§4.1, §4.2).",
    "newton_schulz": "Newton–Schulz iterations and their polynomials: the orthogonalization "
                     "inside Muon (Baggag & Saad §2.4, §5.5).",
    "online_softmax": "The streaming (online) softmax and its rescaling.",
    "optimizers": "The update rules: SGD, momentum, Adam, AdamW, Muon (Baggag & Saad §5.4, "
                  "§5.5).",
    "scaling": "Scaling laws: the Chinchilla loss and its compute-optimal allocation "
               "(Hoffmann et al. 2022; Baggag & Saad §3.14).",
    "transformer": "The decoder-only Transformer as a graph and its back-propagation.",
    "ssm": "State-space models: discretization, selective and associative scans, the "
           "state-space duality, RWKV's WKV, the set transformer (Baptista, Stuart & Tran "
           "§5.2, §5.3.4, App. C).",
    "interpretability": "Weight transformations that leave the model unchanged (folded norms, "
                        "centered writers, rotations) and the residual stream's additive "
                        "decomposition (Baggag & Saad §3.15–3.16).",
    "objectives": "The training objectives: the KL chain rule, forward and reverse KL, the "
                  "KL-regularised RL optimum, DPO, REINFORCE (Baptista, Stuart & Tran §3–4).",
    "decoding": "Decoding strategies as exact transformations of the next-token "
                "distribution: the renormalised filters, temperature's limits, top-p's "
                "smallest set, top-k, min-p and typical sets, beam width one (Baptista, "
                "Stuart & Tran §6).",
    "sharding": "Sharding made exact: tensor, data, vocabulary and sequence (ring) "
                "parallelism, ZeRO, and why Muon needs the Gram all-reduce (Megatron-LM; "
                "ZeRO; Ring Attention).",
    "architectures": "The mathematics of the model types beyond the seed's decoder: "
                     "multi-head latent attention's absorption (DeepSeek-V2).",
    "diffusion": "Discrete (masked) diffusion: the forward process, the time reversal of a "
                 "finite-state chain, the ELBO as a weighted cross-entropy (Baptista, Stuart & "
                 "Tran §9, App. D).",
}

#: family -> its figures ``(file in docs/figures, caption)``
FIGURES: dict[str, list[tuple[str, str]]] = {
    "diffusion": [
        ("diffusion.svg", "The tiny model trained autoregressively and as a masked-diffusion "
                          "model: held-out cross-entropy against the negative ELBO."),
    ],
    "ssm": [
        ("ssm.svg", "The selective scan's FLOPs against causal attention's, counted in the "
                    "running code, and the discretizations' one-step errors."),
    ],
    "scaling": [
        ("chinchilla_isoflop.svg", "Iso-FLOP curves of the Chinchilla law, the proved "
                                   "compute-optimal size marked (Hoffmann et al. 2022, Fig. 3)."),
    ],
    "attention": [
        ("nadaraya_watson.svg", "Nadaraya–Watson regression against a cubic least-squares "
                                "fit (seed Fig. 14)."),
        ("random_features_mse.svg", "Random-feature MSE against the number of features m, "
                                    "measured and predicted."),
        ("attention_cost.svg", "Measured cost of softmax and linear attention "
                               "(`benchmarks/attention.py`)."),
    ],
    "curvature": [
        ("natural_gradient.svg", "Gradient descent against natural gradient (seed Fig. 30)."),
    ],
    "geometry": [
        ("angles.svg", "Angles of 10,000 random vectors in 12,288 dimensions against the "
                       "exact density (seed Fig. 24)."),
        ("jl_distortion.svg", "Johnson–Lindenstrauss distortion, measured against the "
                              "bound."),
        ("intrinsic_dimension.svg", "Intrinsic dimension and anisotropy of the tiny model's "
                                    "residual stream, before and after training "
                                    "(`python derivations/intrinsic.py --figure-only`)."),
    ],
    "jacobians": [
        ("precision_depth.svg", "Error and bound through the depth of the network "
                                "(`python -m nlaverify.precision --figure`)."),
    ],
    "lowrank": [
        ("quantization_error.svg", "Output error against bits, and its bound."),
        ("gradient_energy.svg", "The share of each weight gradient's Frobenius energy in its "
                                "top singular directions."),
        ("lora_finetune.svg", "LoRA, full and random-subspace fine-tuning of `tiny`."),
    ],
    "newton_schulz": [
        ("newton_schulz_maps.svg", "The scalar maps p^k of the Newton–Schulz iterations on "
                                   "[0, 1.3]."),
        ("newton_schulz_spectra.svg", "Spectra before and after k steps."),
    ],
    "optimizers": [
        ("training.svg", "500 steps of `tiny` with SGD, AdamW and Muon "
                         "(`nlaverify train --optimizer all`)."),
    ],
    "transformer": [
        ("tiny_graph.svg", "The `tiny` preset as a graph."),
    ],
}


def public_modules() -> list[str]:
    """Dotted names of the public modules of ``nlaverify``, sorted (no ``_`` part)."""
    mods = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        mods.append(".".join(parts))
    return sorted(mods)


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it holds it already (keeps incremental builds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _prune(folder: Path, keep: set[str], suffix: str) -> None:
    """Remove the generated ``*suffix`` files of ``folder`` not in ``keep`` (a deleted module)."""
    for path in folder.glob(f"*{suffix}"):
        if path.name not in keep:
            path.unlink()


def write_api(srcdir: Path) -> None:
    """``api/<module>.rst`` for every public module and ``api/index.rst``, which links them
    (a list of links, not a toctree: see :data:`ORPHANS`)."""
    out = srcdir / "api"
    mods = public_modules()
    for m in mods:
        _write(out / f"{m}.rst", f":orphan:\n\n{m}\n{'=' * len(m)}\n\n.. automodule:: {m}\n")
    links = "\n".join(f"* :doc:`{m}`" for m in mods)
    _write(out / "index.rst", "API reference\n=============\n\n"
           "Every public module of the package, from its docstrings.\n\n"
           f"{links}\n")
    _prune(out, {f"{m}.rst" for m in mods} | {"index.rst"}, ".rst")


def family_page(srcdir: Path, family: str) -> str:
    """The Markdown of ``families/<family>.md``."""
    lines = [f"# {family.replace('_', ' ').capitalize()}", ""]
    if family in ABOUT:
        lines += [ABOUT[family], ""]
    for name, caption in FIGURES.get(family, []):
        lines += [f"```{{figure}} ../figures/{name}", f":alt: {caption}",
                  ":width: 100%", "", caption, "```", ""]
    lines += [f"Its index of proofs: {{doc}}`../proofs/{family}`. Every proof:", ""]
    lines += [f"- {{doc}}`../proofs/{family}/{p.stem}`"
              for p in sorted((srcdir / "proofs" / family).glob("*.md"))]
    return "\n".join([*lines, ""])


def write_families(srcdir: Path) -> None:
    """``families/<family>.md`` for every ``proofs/<family>.md``, and the families' index."""
    families = sorted(p.stem for p in (srcdir / "proofs").glob("*.md"))
    have = {p.name for p in (srcdir / "figures").glob("*.svg")}
    named = {name for figs in FIGURES.values() for name, _ in figs}
    if named - have or have - named:
        raise ExtensionError(f"docs/_ext/nlaverify_docs.py FIGURES out of step with "
                             f"docs/figures: missing {sorted(named - have)}, "
                             f"unmapped {sorted(have - named)}")
    out = srcdir / "families"
    for family in families:
        _write(out / f"{family}.md", family_page(srcdir, family))
    toc = "\n".join(families)
    _write(out / "index.md", "# Proofs by family\n\n"
           "Every identity the package proves, by family: each family's figures, its index "
           "of proofs (statement, seed section, verdict) and one page per proof, as "
           "`nlaverify derive` wrote them.\n\n"
           f"```{{toctree}}\n:maxdepth: 1\n\n{toc}\n```\n")
    _prune(out, {f"{f}.md" for f in families} | {"index.md"}, ".md")


#: ``(what, name)`` -> the docstring lines of an attribute before napoleon saw them
_ATTRIBUTE_DOCS: dict[tuple[str, str], list[str]] = {}


def _keep_attribute_doc(app: Sphinx, what: str, name: str, obj: object, options: object,
                        lines: list[str]) -> None:
    """Before napoleon: remember an attribute's (a ``#:`` comment's) docstring."""
    if what in {"attribute", "data"}:
        _ATTRIBUTE_DOCS[(what, name)] = list(lines)


def _restore_attribute_doc(app: Sphinx, what: str, name: str, obj: object, options: object,
                           lines: list[str]) -> None:
    """After napoleon: put an attribute's docstring back as it was written.

    Napoleon reads the first line of an attribute's docstring as Google's inline
    ``type: description``: ``#: the statistics of a set of keys: (m, l, O, *more)`` would be
    shown as the description ``(m, l, O, *more)`` of the *type* "the statistics of a set of
    keys", and that "type" cross-referenced (``PUBLISHED_TOTALS``' "... totals, exact:" made
    the ambiguous reference ``exact``). The package's ``#:`` comments are prose, never
    ``type: text``; autodoc gives the type from the annotation.
    """
    if (what, name) in _ATTRIBUTE_DOCS:
        lines[:] = _ATTRIBUTE_DOCS.pop((what, name))


#: Why the proof pages and the API module pages are orphans (reached by the links of their
#: family page and of the API index, not by a toctree): furo renders the whole global toctree
#: into every page's sidebar, so 446 pages each carrying ~450 entries spent 257 of 335
#: profiled seconds of the build there; with them out of the toctree the sidebar holds the
#: guide, the families and the references, and the build takes a fraction of the time.
ORPHANS = ("proofs/", "api/<module>")
#: the ``Certifies`` line of a proof page (``symbolic/document.py`` writes it as code spans)
_CERTIFIES = re.compile(r"^- \*\*Certifies:\*\* (.*)$", re.M)


def link_certified(app: Sphinx, docname: str, source: list[str]) -> None:
    """``source-read``: on a proof page, each certified function named on the ``Certifies``
    line becomes a link to its entry in the API reference (``{py:obj}``). The committed
    Markdown keeps plain code spans, which read well on any viewer."""
    if not docname.startswith("proofs/"):
        return
    source[0] = "---\norphan: true\n---\n" + source[0]  # see ORPHANS

    def link(match: re.Match[str]) -> str:
        names = re.findall(r"`([A-Za-z_][\w.]*)`", match.group(1))
        return "- **Certifies:** " + ", ".join(f"{{py:obj}}`{n}`" for n in names)

    source[0] = _CERTIFIES.sub(link, source[0])


def generate(app: Sphinx) -> None:
    """``builder-inited``: write the generated pages before Sphinx reads the sources."""
    srcdir = Path(app.srcdir)
    write_api(srcdir)
    write_families(srcdir)


def setup(app: Sphinx) -> dict[str, object]:
    """Register the ``builder-inited`` hook."""
    app.connect("builder-inited", generate)
    app.connect("source-read", link_certified)
    # napoleon's handler has the default priority 500: one hook before it, one after
    app.connect("autodoc-process-docstring", _keep_attribute_doc, priority=400)
    app.connect("autodoc-process-docstring", _restore_attribute_doc, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
