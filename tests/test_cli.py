"""The command line."""

from __future__ import annotations

import json

from nlaverify.cli import main


def test_list_json(capsys) -> None:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = {r["id"] for r in rows}
    assert {"softmax_vjp", "layernorm_jacobian", "mlp_backprop_recursion"} <= ids
    assert all(r["status"] == "proved" for r in rows)


def test_unknown_identity_exit_2(capsys) -> None:
    assert main(["derive", "no_such_identity", "--check"]) == 2
    assert "unknown identity id 'no_such_identity'" in capsys.readouterr().err


def test_verify_summary(capsys, monkeypatch) -> None:
    # the command on three ops (every op's VJP and JVP against JAX: test_ops_crosscheck,
    # test_jvp; the whole `nlaverify verify` is the README's main job)
    import nlaverify.crosscheck as crosscheck

    run = crosscheck.run_crosscheck
    monkeypatch.setattr(crosscheck, "run_crosscheck", lambda *a, **k: run(
        *a, **{**k, "ops": ("softmax", "causal_attention", "favor_plus_attention")}))
    assert main(["verify", "--backends", "numpy,jax,cupy"]) == 0
    out = capsys.readouterr().out
    assert "numpy vs jax.vjp" in out and "cross-check:" in out
    assert ("SKIPPED" in out) or ("cupy float64" in out)


def test_verify_unknown_backend(capsys) -> None:
    assert main(["verify", "--backends", "numpy,torch"]) == 2
    assert "unknown backend 'torch'" in capsys.readouterr().err


def test_newton_schulz_json(capsys) -> None:
    import numpy as np

    from nlaverify.optim.certify import iterate_map
    from nlaverify.optim.newton_schulz import MUON

    assert main(["newton-schulz", "--steps", "3", "--lower", "0.01", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["comparison"]}
    designed = next(r for name, r in rows.items() if name.startswith("designed"))
    assert designed["error"] < rows["muon"]["error"]
    # the certified range contains Muon's map sampled on [0.01, 1], and both ends are nearly
    # attained (a range that ignored the critical points would miss the samples)
    values = iterate_map(MUON, 3, np.linspace(0.01, 1.0, 20001))
    assert rows["muon"]["lo"] <= values.min() and values.max() <= rows["muon"]["hi"]
    assert out["dynamics"]["muon"]["p(1)"] != 1.0
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["newton-schulz", "--lower", "0"])
    assert exit_info.value.code == 2
    assert "expected a number in (0, 1]" in capsys.readouterr().err


# -- newcomer friction (issue 18) ----------------------------------------------------------


def test_version_and_python_dash_m(tmp_path):
    """``nlaverify --version`` and ``python -m nlaverify`` (the same command)."""
    import subprocess
    import sys
    from importlib.metadata import version

    import pytest

    from nlaverify.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    proc = subprocess.run([sys.executable, "-m", "nlaverify", "--version"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"nlaverify {version('nlaverify')}"


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    from nlaverify import cli

    def interrupted(args):
        raise KeyboardInterrupt

    parser = cli.build_parser()
    args = parser.parse_args(["list"])
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(args, interrupted))
    assert cli.main(["list"]) == 130
    assert capsys.readouterr().err.strip() == "nlaverify: interrupted"


class _Fixed:
    """A parser stand-in that returns fixed arguments with a given command function."""

    def __init__(self, args, func):
        self.args = args
        self.args.func = func

    def parse_args(self, argv):
        return self.args


def test_derivation_scripts_have_help_and_write_nothing(tmp_path):
    """Every derivations/ script answers --help without deriving or writing (four of them
    used to run and write ./docs/proofs into the current folder), and refuses an unknown
    argument with exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    scripts = sorted((Path(__file__).resolve().parents[1] / "derivations").glob("*.py"))
    assert len(scripts) >= 11
    for script in scripts:
        proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                              text=True, cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, (script.name, proc.stderr[-500:])
        assert proc.stdout.strip(), script.name
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())
    bad = subprocess.run([sys.executable, str(scripts[0].parent / "transformer.py"), "--chek"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert bad.returncode == 2 and "--chek" in bad.stderr
    assert not any(tmp_path.iterdir())


def test_interop_names_importable_from_the_package():
    from nlaverify.interop import (  # noqa: F401
        config_from_file,
        load_checkpoint,
        load_hf_config,
        load_safetensors,
        params_from_hf,
        params_to_hf,
        save_safetensors,
        verify_hf,
    )


def test_readme_names_every_public_strategy():
    """The README's strategies row lists every public name of nlaverify.strategies (it
    named 5 of 12)."""
    import inspect
    from pathlib import Path

    import nlaverify.strategies as strategies

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `nlaverify.strategies`"))
    names = [n for n in strategies.__all__ if callable(getattr(strategies, n))
             and not inspect.isclass(getattr(strategies, n))]
    missing = [n for n in names if f"`{n}`" not in row]
    assert not missing, missing


def test_verify_one_op(capsys):
    """``verify --op NAME`` cross-checks that op alone (verify ran every op, ~1 min); an
    unknown name lists the known ones; --op with --preset is refused."""
    from nlaverify.cli import main

    assert main(["verify", "--op", "rmsnorm,softmax", "--backends", "numpy,mpmath"]) == 0
    out = capsys.readouterr().out
    ops = {line.split()[0] for line in out.splitlines()[1:-1]}
    assert ops == {"rmsnorm", "softmax"}, ops
    assert main(["verify", "--op", "rmsnrom"]) == 2
    assert "unknown op 'rmsnrom'" in capsys.readouterr().err
    assert main(["verify", "--op", "rmsnorm", "--preset", "tiny"]) == 2


def test_proof_root_comes_from_the_checkout_not_the_cwd(tmp_path, monkeypatch, capsys):
    """``nlaverify list`` from another folder reads the checkout's verdicts (it showed every
    identity "not derived"); outside a checkout, list and derive say so in one line and
    create nothing in the current folder (derive used to create ./docs/proofs)."""
    from nlaverify import cli, commands

    monkeypatch.chdir(tmp_path)
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "not derived" not in out and "proved" in out
    monkeypatch.setattr(commands, "checkout_proofs", lambda: None)  # where the commands look
    for argv in (["list"], ["derive", "relu_vjp"]):
        assert cli.main(argv) == 2
        assert "not running from a checkout" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_verify_hf_without_the_extra_or_the_file_is_one_line(monkeypatch, capsys, tmp_path):
    """``verify --hf`` without torch/transformers, or on a missing path, is one line and
    exit 2 (it was a traceback, even for a missing file)."""
    import json
    import sys

    from nlaverify.cli import main

    assert main(["verify", "--hf", str(tmp_path / "missing.json")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2"}))
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    assert main(["verify", "--hf", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'nlaverify[hf]'" in err and len(err.strip().splitlines()) == 1


def test_train_refuses_before_training(capsys):
    """An unwritable --figure and a batch whose activations exceed the machine are refused in
    one line before any step runs (training used to finish, then crash losing the results;
    --batch 100000000 went to the OOM killer)."""
    from nlaverify.cli import main
    from nlaverify.train import char_config, load_corpus, step_memory

    for bad in ("/proc/nonexistent/x.svg", "/proc/x.svg"):  # /proc/x.svg passed os.access
        assert main(["train", "--steps", "1", "--figure", bad]) == 2
        assert "cannot write a file in '/proc" in capsys.readouterr().err
    assert main(["train", "--steps", "1", "--batch", "100000000"]) == 2
    assert "GiB of activations" in capsys.readouterr().err
    cfg = char_config("tiny", load_corpus().vocab_size)
    assert step_memory(cfg, 8, 2) == 2 * step_memory(cfg, 8, 1)  # linear in the batch


def test_preset_verify_with_every_backend_skipped_fails(capsys):
    """``verify --preset tiny --backends cupy`` on a machine without CuPy checked nothing
    that was asked: exit 1 like ``verify --backends cupy`` (it exited 0)."""
    import pytest

    from nlaverify.cli import main

    try:
        import cupy  # noqa: F401
    except ImportError:
        assert main(["verify", "--preset", "tiny", "--backends", "cupy"]) == 1
        assert "SKIPPED" in capsys.readouterr().out
    else:  # pragma: no cover - a GPU machine
        pytest.skip("CuPy is installed here")


def test_verify_reports_progress_per_op(capsys):
    """``nlaverify verify`` ran ~1 min printing nothing: one line per op on stderr when it is
    not a terminal (a tqdm bar on one)."""
    from nlaverify.cli import main

    assert main(["verify", "--op", "relu,softmax", "--backends", "numpy,mpmath"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["verify: [1/2] relu", "verify: [2/2] softmax"]


def test_the_command_turns_on_a_persistent_jax_cache(tmp_path) -> None:
    """The nlaverify command (not a call from Python) caches its compiled JAX programs on
    disk, unless the user chose a cache folder or turned it off."""
    from nlaverify.cli import persistent_jax_cache

    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert persistent_jax_cache(env) == str(tmp_path / "nlaverify" / "jax")
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "nlaverify" / "jax")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    mine = {"JAX_COMPILATION_CACHE_DIR": "/mine"}
    assert persistent_jax_cache(mine) == "/mine" and len(mine) == 1
    off = {"NLAVERIFY_JAX_CACHE": "0"}
    assert persistent_jax_cache(off) is None and "JAX_COMPILATION_CACHE_DIR" not in off


def test_output_paths_are_probed_and_empty_roots_named(tmp_path, capsys):
    """Every output path is tried (a file created and removed) before any work; a --root
    without proofs is named in one line (it used to list every identity as 'not derived')."""
    from nlaverify.cli import main

    assert main(["list", "--root", str(tmp_path)]) == 2
    assert "holds no proofs (no index.json there)" in capsys.readouterr().err
    assert main(["derive", "--check", "--root", "/dev/null", "rmsnorm_vjp"]) == 2
    assert "holds no proofs" in capsys.readouterr().err
    assert main(["derive", "--root", "/proc/x", "rmsnorm_vjp"]) == 2
    assert "cannot write a file in '/proc/x'" in capsys.readouterr().err
    assert main(["tokenize", "train", "--merges", "/proc/m.txt"]) == 2
    assert "--merges '/proc/m.txt': cannot write" in capsys.readouterr().err
    assert main(["tokenize", "train", "--merges", str(tmp_path)]) == 2
    assert "expected a file, got a folder" in capsys.readouterr().err
    assert not any(p.name.startswith(".nlaverify-probe") for p in tmp_path.iterdir())
