"""Sphinx configuration of the nlaverify documentation site (``scripts/build_docs.sh``).

Math is rendered by MathJax 3 served from the site itself: ``sphinx-mathjax-offline`` ships
MathJax 3.2.2 in its wheel and copies it to ``_static/mathjax`` after each build, so neither
the build nor a reader needs the network (Sphinx's default loads MathJax from a CDN).
KaTeX (``sphinxcontrib-katex``) was not taken: it also loads its assets from a CDN unless
the KaTeX distribution is vendored by hand, and its server-side rendering needs Node.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

project = "nlaverify"
author = "nlaverify contributors"
copyright = "nlaverify contributors"  # Sphinx's name (shadows the builtin on purpose)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # after sphinx.ext.mathjax: it sets mathjax_path
    "sphinxarg.ext",
    "nlaverify_docs",  # docs/_ext: writes docs/api and docs/families at builder-inited
]
# the local copy of MathJax (the extension sets the same; stated here so it is visible)
mathjax_path = "mathjax/tex-chtml.js"
# MathJax 3 (the local copy is 3.2.2, so mathjax3_config, not Sphinx 9's mathjax4_config);
# textmacros: the proof pages write ``\text{sequence\_mean}``, which plain MathJax shows with
# its backslash (text mode knows no macro without this package); loaded from the local copy
mathjax3_config = {
    "loader": {"load": ["[tex]/textmacros"]},
    "tex": {"packages": {"[+]": ["textmacros"]}},
}
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "proofs/index.json"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "nlaverify"
autodoc_default_options = {"members": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
