"""The documentation site builds without a warning, and works in a browser, offline.

The site (``docs/``, Sphinx + MyST, ``scripts/build_docs.sh``) is built once per module into
a temporary folder; the build must report no warning. Then headless Chromium (Debian's
``/usr/bin/chromium`` and ``/usr/bin/chromedriver``, driven by Selenium) opens it through a
local ``http.server``: a proof page's math is typeset by the site's own copy of MathJax (no
raw ``$$``, ``\\[`` or ``\\(`` left, no TeX error), the search page finds ``rmsnorm``, and a
figure's SVG loads. Every resource a page loads comes from the local server: the site needs
no network. Skipped, with the reason, without the ``docs`` extra or without Chromium.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: the proof page whose math is checked, and the figure page
MATH_PAGE = "proofs/jacobians/rmsnorm_vjp.html"
FIGURE_PAGE = "families/curvature.html"
TIMEOUT = 60  # seconds a page may take to typeset or search (2 slow CPUs)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict[str, Any]:
    """Build the site once: ``{"html": folder, "warnings": text, "log": text}``."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed "
                                         "(python3 -m pip install -e '.[docs]')")
    pytest.importorskip("myst_parser", reason="the docs extra is not installed")
    root = tmp_path_factory.mktemp("docs_site")
    html, warnings = root / "html", root / "warnings.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-w", str(warnings),
         "-d", str(root / "doctrees"), str(REPO / "docs"), str(html)],
        capture_output=True, text=True, cwd=root, check=False)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout}\n{proc.stderr}"
    return {"html": html, "warnings": warnings.read_text(encoding="utf-8"),
            "log": proc.stdout + proc.stderr}


def test_build_has_no_warning(site):
    assert not site["warnings"].strip(), f"the docs build warned:\n{site['warnings']}"


def test_generated_pages_are_there(site):
    html = site["html"]
    assert (html / "api" / "nlaverify.check.op.html").is_file()
    assert (html / "cli.html").read_text(encoding="utf-8").count("newton-schulz") > 0
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    proofs = sorted((REPO / "docs" / "proofs").glob("*/*.md"))
    assert proofs, "no proof page in docs/proofs"
    missing = [p for p in proofs
               if not (html / p.relative_to(REPO / "docs").with_suffix(".html")).is_file()]
    assert not missing, f"proof pages not rendered: {missing[:5]}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        pass


@pytest.fixture(scope="module")
def server(site) -> Iterator[str]:
    """The built site over ``http://127.0.0.1:<port>/``."""
    handler = functools.partial(_QuietHandler, directory=str(site["html"]))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def make_browser(profile: Path) -> Any:
    """Headless Chromium under Selenium (the system chromedriver, nothing downloaded)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1024", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)),
                            options=options)


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Any]:
    pytest.importorskip("selenium", reason="selenium (the docs extra) is not installed")
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not tool.exists():
            pytest.skip(f"{tool} not found (apt-get install chromium chromium-driver)")
    driver = make_browser(tmp_path_factory.mktemp("chromium_profile"))
    driver.set_page_load_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, what: str) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, TIMEOUT, poll_frequency=0.2).until(condition)
    except TimeoutException:
        raise AssertionError(f"timed out after {TIMEOUT} s waiting for {what} "
                             f"on {driver.current_url}") from None


def assert_local_only(driver: Any, base: str) -> None:
    """Every resource the page loaded came from the local server."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);")
    remote = [n for n in names if not n.startswith(base) and not n.startswith("data:")]
    assert not remote, f"{driver.current_url} loaded remote resources: {remote}"


def check_math(driver: Any, base: str, page: str = MATH_PAGE) -> None:
    """``page``'s math is typeset by the local MathJax: no raw TeX left, no TeX error."""
    driver.get(base + page)
    from selenium.common.exceptions import TimeoutException

    driver.set_script_timeout(TIMEOUT)
    try:
        done = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const go = () => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " ? MathJax.startup.promise.then(() => done(true), e => done(String(e)))"
            " : setTimeout(go, 100);"
            "go();")
    except TimeoutException:
        raise AssertionError(f"MathJax did not start within {TIMEOUT} s on {page} "
                             "(is _static/mathjax there?)") from None
    assert done is True, f"MathJax failed on {page}: {done}"
    n_math = driver.execute_script("return document.querySelectorAll('.math').length;")
    n_typeset = driver.execute_script(
        "return document.querySelectorAll('mjx-container').length;")
    assert n_math > 0 and n_typeset >= n_math, (n_math, n_typeset)
    # the visible prose: the article without its code and its typeset math
    text = driver.execute_script(
        "const a = document.querySelector('article').cloneNode(true);"
        "a.querySelectorAll('pre, code, mjx-container').forEach(e => e.remove());"
        "return a.innerText;")
    for raw in ("$", "\\[", "\\(", "\\frac", "\\partial"):
        assert raw not in text, f"raw TeX {raw!r} left in the visible text of {page}"
    # a TeX error (mjx-merror), or an unknown macro (typeset as its red name, a backslash)
    errors = driver.execute_script(
        "return [...document.querySelectorAll('mjx-container')].filter(e =>"
        " e.querySelector('mjx-merror') || e.textContent.includes('\\\\'))"
        ".map(e => e.textContent);")
    assert not errors, f"TeX errors on {page}: {errors}"
    src = driver.execute_script(
        "return [...document.scripts].map(s => s.src).filter(s => s.includes('tex-'));")
    assert src and all(s.startswith(base + "_static/mathjax/") for s in src), src
    assert_local_only(driver, base)


def check_search(driver: Any, base: str, word: str = "rmsnorm") -> None:
    """``search.html?q=word`` lists a result, and the first result's page has the word."""
    driver.get(f"{base}search.html?q={word}")
    links = _wait(driver, lambda d: d.execute_script(
        "const a = [...document.querySelectorAll('#search-results ul.search li a')]"
        ".map(e => e.href); return a.length ? a : false;"), f"search results for {word!r}")
    assert_local_only(driver, base)
    driver.get(links[0])
    text = driver.execute_script("return document.body.innerText;").lower()
    assert word in text, f"the first result for {word!r}, {links[0]}, does not mention it"


def check_figure(driver: Any, base: str, page: str = FIGURE_PAGE) -> None:
    """Every SVG ``<img>`` of ``page`` loads (``naturalWidth > 0``)."""
    driver.get(base + page)
    _wait(driver, lambda d: d.execute_script(
        "return [...document.images].every(i => i.complete);"), "the images to load")
    images = driver.execute_script(
        "return [...document.images].filter(i => i.src.endsWith('.svg'))"
        ".map(i => [i.src, i.naturalWidth]);")
    assert images, f"no SVG image on {page}"
    broken = [src for src, width in images if not width]
    assert not broken, f"SVG images that did not load on {page}: {broken}"
    assert_local_only(driver, base)


def test_proof_page_math_renders(browser, server, tmp_path_factory):
    try:
        check_math(browser, server)
    except AssertionError:
        browser.save_screenshot(str(tmp_path_factory.mktemp("shots") / "math.png"))
        raise


def test_glossary_math_renders(browser, server):
    check_math(browser, server, "glossary.html")


def test_search_finds_rmsnorm(browser, server):
    check_search(browser, server)


def test_figure_loads(browser, server):
    check_figure(browser, server)


#: the guide's family pages that carry figures (all but real models)
GUIDE_FIGURE_PAGES = ("pipeline", "precision", "curvature", "optimizers", "attention",
                      "low_rank", "geometry")


@pytest.mark.parametrize("family", GUIDE_FIGURE_PAGES)
def test_guide_family_page_figures_load(browser, server, family):
    check_figure(browser, server, f"guide/{family}.html")


def test_guide_is_split_into_family_pages(site):
    """The guide's overview links every family page, and each page exists."""
    overview = (site["html"] / "guide.html").read_text(encoding="utf-8")
    for family in (*GUIDE_FIGURE_PAGES, "real_models"):
        assert (site["html"] / "guide" / f"{family}.html").is_file(), family
        assert f'href="guide/{family}.html' in overview, f"guide.html does not link {family}"


def test_no_build_output_in_the_source_tree():
    """The site builds into ``docs/_build``; that and the generated pages are gitignored."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("docs/_build/html/index.html", "docs/api/index.rst",
                 "docs/families/index.md"):
        proc = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO, check=False)
        assert proc.returncode == 0, f"{path} is not gitignored"


def test_proof_page_links_its_certified_functions_to_the_api(site):
    page = (site["html"] / MATH_PAGE).read_text(encoding="utf-8")
    for name in ("rmsnorm", "rmsnorm_vjp"):
        assert f'href="../../api/nlaverify.ops.norms.html#nlaverify.ops.norms.{name}"' in page, (
            f"{MATH_PAGE} does not link {name} to its API entry")


def test_every_cli_option_is_on_the_cli_page(site):
    """The CLI reference and the parser agree: every subcommand and every option string of
    ``nlaverify.cli.build_parser()`` appears on ``cli.html`` (generated by sphinx-argparse
    from the same parser; a hand-edited or stale page fails here)."""
    import argparse
    import html as html_lib
    import re

    from nlaverify.cli import build_parser

    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", (site["html"] / "cli.html").read_text(
        encoding="utf-8")))
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, command in sub.choices.items():
        if f"nlaverify {name}" not in text and not re.search(rf"\b{re.escape(name)}\b", text):
            missing.append(name)
        for action in command._actions:
            missing += [f"{name} {opt}" for opt in action.option_strings
                        if opt not in ("-h", "--help") and opt not in text]
    assert not missing, f"CLI options missing from cli.html: {missing}"


#: the packages whose every public function and class the API reference must show
API_PACKAGES = ("check", "ops", "curvature", "optim", "interop")


def test_every_public_function_is_in_the_api_reference(site):
    """Each public function or class of the packages above (``__all__``, else the names
    without ``_``) has its entry on the API page of the module that defines it."""
    import importlib
    import inspect

    missing, count = [], 0
    for package in API_PACKAGES:
        module = importlib.import_module(f"nlaverify.{package}")
        names = getattr(module, "__all__", None) or [n for n in dir(module)
                                                     if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or \
                    not obj.__module__.startswith("nlaverify"):
                continue
            count += 1
            page = site["html"] / "api" / f"{obj.__module__}.html"
            anchor = f'id="{obj.__module__}.{obj.__qualname__}"'
            if not page.is_file() or anchor not in page.read_text(encoding="utf-8"):
                missing.append(f"nlaverify.{package}.{name} ({obj.__module__})")
    assert count > 150, f"only {count} public functions and classes found"
    assert not missing, f"not in the API reference: {missing}"


def test_api_page_of_check_op_shows_its_signature(site):
    import inspect

    from nlaverify.check import check_op

    page = (site["html"] / "api" / "nlaverify.check.op.html").read_text(encoding="utf-8")
    assert 'id="nlaverify.check.op.check_op"' in page, "no entry for check_op"
    for name in inspect.signature(check_op).parameters:
        assert f'<span class="n"><span class="pre">{name}</span>' in page, (
            f"parameter {name!r} of check_op is not in its signature on the API page")


def test_no_internal_link_is_broken(site):
    """Every relative ``href``/``src`` of every built page names a file of the site, and every
    ``#anchor`` into a page names an ``id`` that page has."""
    import re
    from urllib.parse import unquote, urlsplit

    html = site["html"]
    ids: dict[Path, set[str]] = {}

    def anchors(page: Path) -> set[str]:
        if page not in ids:
            ids[page] = set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))
        return ids[page]

    broken = []
    pages = sorted(html.rglob("*.html"))
    for page in pages:
        for ref in re.findall(r'\b(?:href|src)="([^"]+)"', page.read_text(encoding="utf-8")):
            parts = urlsplit(ref)
            if parts.scheme or ref.startswith(("//", "mailto:", "javascript:")):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html)} -> {ref}")
            elif parts.fragment and target.suffix == ".html" and \
                    unquote(parts.fragment) not in anchors(target):
                broken.append(f"{page.relative_to(html)} -> {ref} (no such anchor)")
    assert len(pages) > 400, f"only {len(pages)} pages built"
    assert not broken, f"{len(broken)} broken internal links, e.g.:\n" + "\n".join(broken[:20])


def test_screenshots_of_three_pages(browser, server, site):
    """Screenshots of the home page, a proof page and a family page with its figures, into
    the build folder (``screenshots/``, not committed): look at them before a landing."""
    out = site["html"].parent / "screenshots"
    out.mkdir(exist_ok=True)
    for name, page in (("home", "index.html"), ("proof", MATH_PAGE), ("family", FIGURE_PAGE)):
        browser.get(server + page)
        _wait(browser, lambda d: d.execute_script("return document.readyState") == "complete",
              f"{page} to load")
        path = out / f"{name}.png"
        assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000, path
