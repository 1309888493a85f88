r"""``nlaverify transform``: apply weight transformations in turn to a preset (seeded
weights) or a Hugging Face checkpoint, and check each against its input node by node
(:func:`~nlaverify.transform.verify.check_transform`); optionally write the transformed
parameters as a Hugging Face checkpoint (``--out DIR``: ``config.json`` and
``model.safetensors``, written only when every check passes).

``--steps`` is a comma-separated list of ``fold-norms``, ``center-writers``,
``center-unembedding``, ``fold-value-bias``, ``rotate`` (Hadamard) or ``rotate:random``
(a seeded orthogonal matrix). Baggag & Saad §3.15-3.16; Ashkboos et al. 2024.
"""

from __future__ import annotations

import argparse
from typing import Any

from nlaverify.errors import ArgumentError

#: the step names of ``--steps`` and what each calls
STEPS = ("fold-norms", "center-writers", "center-unembedding", "fold-value-bias", "rotate",
         "rotate:random")


def _apply(step: str, config: Any, params: dict[str, Any], seed: int) -> Any:
    from nlaverify import transform as T

    if step == "fold-norms":
        return T.fold_norms(config, params)
    if step == "center-writers":
        return T.center_writers(config, params)
    if step == "center-unembedding":
        return T.center_unembedding(config, params)
    if step == "fold-value-bias":
        return T.fold_value_bias(config, params)
    d = config.d_model
    Q = T.random_orthogonal(d, seed) if step == "rotate:random" else T.hadamard(d)
    return T.rotate(config, params, Q)


def transform_command(args: argparse.Namespace) -> int:
    """Run ``nlaverify transform`` (module docstring); exit 0 when every check passes."""
    from nlaverify import jsonout
    from nlaverify.config import preset
    from nlaverify.graph.build import build_transformer
    from nlaverify.graph.run import init_params
    from nlaverify.transform.verify import check_transform

    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if not steps or bad:
        raise ArgumentError(f"transform: argument '--steps': expected a comma-separated list "
                            f"of {', '.join(STEPS)}, got {args.steps!r}")
    model_type = None
    if args.hf is not None:
        import numpy as np

        from nlaverify.interop.weights import load_checkpoint

        hf, params = load_checkpoint(args.hf, dtype=np.float64)
        config, model_type = hf.config, hf.model_type
    else:
        config = preset(args.preset)
        params = init_params(build_transformer(config), args.seed)
    if args.out is not None:
        from nlaverify.outputs import probe_folder

        probe_folder(args.out, "--out", "transform")
    rows, ok = [], True
    for step in steps:
        result = _apply(step, config, params, args.seed)
        check = check_transform(config, params, result, seed=args.seed)
        worst = check.worst()
        rows.append({"step": step, "transform": result.name, "ok": check.ok,
                     "nodes": len(check.rows), "worst_node": worst.node,
                     "worst_ratio": worst.ratio, "first_failure": check.first_failure})
        ok = ok and check.ok
        config, params = result.config, result.params
        if not check.ok:
            break
    written = None
    if ok and args.out is not None:
        written = _write(args.out, config, params, model_type)
    if args.json:
        jsonout.dump({"source": args.hf or args.preset, "ok": ok, "steps": rows,
                      "written": written})
        return 0 if ok else 1
    for r in rows:
        verdict = "ok" if r["ok"] else f"FAIL at {r['first_failure']}"
        print(f"{r['step']:<20} {r['nodes']:>3} claimed nodes, worst {r['worst_node']} "
              f"error/bound {r['worst_ratio']:.2e}: {verdict}")
    print(f"transform {args.hf or args.preset}: {'ok' if ok else 'FAIL'}"
          + (f"; written to {written}" if written else ""))
    return 0 if ok else 1


def _write(out: str, config: Any, params: dict[str, Any], model_type: str | None) -> str:
    """``config.json`` and ``model.safetensors`` of the transformed model in ``out``."""
    import json
    from pathlib import Path

    from nlaverify.interop.hf_config import hf_config_dict
    from nlaverify.interop.weights import params_to_hf, save_safetensors
    from nlaverify.symbolic.document import write_atomically

    mt = model_type or ("llama" if config.norm == "rmsnorm" else "gpt2")
    folder = Path(out)
    save_safetensors(folder / "model.safetensors", params_to_hf(config, mt, params))
    write_atomically(folder, {"config.json": json.dumps(hf_config_dict(config, mt), indent=1)
                              + "\n"})
    return str(folder)
