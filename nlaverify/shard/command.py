r"""``nlaverify verify --preset NAME --mesh dp=2,tp=2``: the sharded run on simulated CPU
devices, in a subprocess, and its report.

**Simulated devices.** XLA fixes its number of CPU devices when JAX starts, from
``XLA_FLAGS=--xla_force_host_platform_device_count=N``; the command line (and any test)
has started JAX long before. :func:`run_shard_verify` therefore checks the mesh against the
config first (:func:`nlaverify.shard.plan.plan_mesh`: a bad mesh is an error before anything
runs), then runs :func:`nlaverify.shard.run.shard_verify` in a fresh Python subprocess with
that flag (and ``JAX_PLATFORMS=cpu``) and reads its report back as one JSON line. Where
``XLA_FLAGS`` already fixes a device count, that count is the devices that exist, and a mesh
needing more is refused; otherwise the subprocess gets exactly the mesh's devices.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from nlaverify.config import TransformerConfig
from nlaverify.errors import ArgumentError
from nlaverify.shard.plan import MeshPlan, default_run_size, parse_mesh, plan_mesh
from nlaverify.shard.run import PLANTS, ShardReport, ShardRow

_FLAG = "--xla_force_host_platform_device_count"


def existing_devices(environ: dict[str, str] | None = None) -> int | None:
    """The CPU device count ``XLA_FLAGS`` already fixes, or ``None``."""
    flags = (os.environ if environ is None else environ).get("XLA_FLAGS", "")
    m = re.search(_FLAG + r"=(\S*)", flags)
    if m is None:
        return None
    if not m.group(1).isdigit() or int(m.group(1)) < 1:
        raise ArgumentError(f"mesh: XLA_FLAGS sets {_FLAG}={m.group(1)!r}: expected a "
                            f"positive integer count of devices")
    return int(m.group(1))


def run_shard_verify(config: TransformerConfig, mesh: str, *, seq_len: int | None = None,
                     batch: int | None = None, seed: int = 0, plants: Sequence[str] = (),
                     devices: int | None = None, timeout: float = 600) -> ShardReport:
    """Check ``mesh`` against ``config`` (an :class:`~nlaverify.errors.ArgumentError`
    before anything runs), then compare the sharded run with the unsharded one node by node
    on simulated CPU devices, in a subprocess. ``seq_len`` and ``batch`` default to
    :func:`~nlaverify.shard.plan.default_run_size`; ``devices`` (default: ``XLA_FLAGS``'s
    count, else the mesh's) is how many simulated devices exist."""
    from nlaverify.graph.run import check_run_size

    given = seq_len
    seq_len, batch = default_run_size(mesh, seq_len, batch)
    sp = parse_mesh(mesh).get("sp", 1)
    if given is None and seq_len > config.context:
        raise ArgumentError(f"mesh: sp={sp} needs a sequence of at least {sp} tokens (one per "
                            f"shard), more than the context of {config.name} "
                            f"({config.context})")
    check_run_size(config, seq_len, batch)
    unknown = [p for p in plants if p not in PLANTS]
    if unknown:
        raise ArgumentError(f"mesh: unknown plant {unknown[0]!r}: expected some of "
                            f"{', '.join(PLANTS)}")
    exist = devices if devices is not None else existing_devices()
    plan = plan_mesh(config, mesh, seq_len=seq_len, batch=batch, devices=exist)
    for p in plants:
        if plan.size(PLANTS[p][0]) == 1:
            raise ArgumentError(f"mesh: plant {p!r} needs a {PLANTS[p][0]} axis larger than 1")
    count = exist if exist is not None else plan.devices
    flags = re.sub(_FLAG + r"=\d+", "", os.environ.get("XLA_FLAGS", ""))
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"{flags} {_FLAG}={count}".strip())
    job = {"config": config.as_dict(), "mesh": mesh, "seq_len": seq_len, "batch": batch,
           "seed": seed, "plants": list(plants)}
    code = "import sys; from nlaverify.shard.command import _main; _main(sys.argv[1])"
    out = subprocess.run([sys.executable, "-c", code, json.dumps(job)], env=env,
                         capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"run_shard_verify: the subprocess failed ({out.returncode}):\n"
                           f"{out.stderr[-4000:]}")
    return _report(json.loads(out.stdout.splitlines()[-1]))


def _report(d: dict[str, Any]) -> ShardReport:
    d = dict(d)
    d.pop("ok", None)
    rows = [ShardRow(**r) for r in d.pop("rows")]
    return ShardReport(**d, rows=rows)


def _main(arg: str) -> None:
    """The subprocess side of :func:`run_shard_verify`: the report as one JSON line."""
    from nlaverify.shard.run import shard_verify

    job = json.loads(arg)
    config = TransformerConfig(**job["config"])
    plan: MeshPlan = plan_mesh(config, job["mesh"], seq_len=job["seq_len"],
                               batch=job["batch"])
    report = shard_verify(config, plan, seed=job["seed"], plants=job["plants"])
    print(json.dumps(report.as_dict()))


def format_report(report: ShardReport, per_node: bool = True) -> str:
    """Per-node table (error/bound of value and cotangent, the node's layout) and the
    verdict, naming the first divergent node and the collective at fault."""
    lines = []
    if per_node:
        lines.append(f"{'node':<28} {'op':<14} {'layout':<26} {'val':>9} {'cot':>9}")
        for r in report.rows:
            cot = f"{r.cot_error / r.cot_bound:9.2e}" if r.cot_error is not None and \
                r.cot_bound else f"{'':>9}"
            lines.append(f"{r.node:<28} {r.op:<14} {r.layout:<26} "
                         f"{r.value_error / r.value_bound:9.2e} {cot}")
        lines.append("(entries are error / bound; a check passes when <= 1)")
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.plants:
        lines.append(f"planted: {', '.join(report.plants)}")
    made = ", ".join(f"{n} {k}" for k, n in report.collectives.items()) or "none"
    shape = f"seq_len {report.seq_len}" + (f", batch {report.batch}" if report.batch else "")
    lines.append(f"mesh {report.mesh} on {report.devices} simulated CPU devices ({shape}); "
                 f"XLA's collectives: {made}; accumulation length k={report.accumulation}")
    if report.first_value_divergence:
        lines.append(f"first divergent value: {report.first_value_divergence}: "
                     f"{report.value_collective}")
    if report.first_cotangent_divergence:
        why = report.cotangent_collective if report.first_value_divergence is None else \
            "downstream of the first divergent value"
        lines.append(f"first divergent cotangent (back-propagation order): "
                     f"{report.first_cotangent_divergence}: {why}")
    status = "ok" if report.ok else "FAIL"
    lines.append(f"sharded {report.config} ({report.mesh}) vs unsharded: {len(report.rows)} "
                 f"nodes, worst error/bound {report.worst():.2e}: {status}")
    return "\n".join(lines)


__all__ = ["existing_devices", "format_report", "run_shard_verify"]
