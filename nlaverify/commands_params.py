"""``nlaverify params``: the parameter count of a preset or a config file, by component, with
LoRA's trainable share (``--lora``) and, for a mixture of experts, the parameters one token
activates (:func:`nlaverify.config_moe.activated_parameters`)."""

from __future__ import annotations

import argparse

from nlaverify import jsonout
from nlaverify.errors import ArgumentError

__all__: list[str] = []


def _cmd_params(args: argparse.Namespace) -> int:
    from nlaverify.config import preset
    from nlaverify.config_moe import activated_line
    from nlaverify.graph.build import build_transformer, parameter_counts

    if (args.preset is None) == (args.config is None):
        raise ArgumentError("params: expected exactly one of --preset and --config")
    if args.preset is not None:
        cfg, source = preset(args.preset), {"preset": args.preset}
    else:
        from nlaverify.interop import config_from_file, config_note

        cfg = config_from_file(args.config)  # a note: what of the checkpoint is left out
        source = {"config_file": args.config, **config_note(cfg)}
    if args.lora is not None:
        cfg = cfg.replace(**_parse_lora(args.lora))
    counts = parameter_counts(build_transformer(cfg))
    trainable = counts.by_component.get("lora") if cfg.lora_rank else None
    active = activated_line(cfg, counts)  # a mixture of experts: what one token uses
    if args.json:
        extra = {} if trainable is None else {"lora_trainable": trainable}
        extra |= {} if active is None else {"activated_per_token": active[0]}
        jsonout.dump({**source, "config": cfg.as_dict(), **counts.as_dict(), **extra})
        return 0
    width = max(len(k) for k in counts.by_component)
    for k, v in counts.by_component.items():
        print(f"{k:<{width}}  {v:>20,}  {100 * v / counts.total:6.2f} %")
    if counts.norms_per_block:
        print(f"{'norms per block':<{width}}  {next(iter(counts.norms_per_block.values())):>20,}")
    note = f"\nnote: {source['note']}" if "note" in source else ""
    print(f"{'total':<{width}}  {counts.total:>20,}")
    if active is not None:
        print(f"{'activated per token':<{width}}  {active[1]}")
    if trainable is not None:
        share = 100 * trainable / counts.total
        print(f"{'LoRA trainable':<{width}}  {trainable:>20,}  {share:6.3f} %  (rank "
              f"{cfg.lora_rank} on {', '.join(cfg.lora_targets)}; the rest frozen)")
    if note:
        print(note.lstrip("\n"))
    return 0


def _parse_lora(spec: str) -> dict[str, object]:
    """``r=4,targets=q,v[,alpha=8]`` -> config fields (``targets`` takes the names after it
    up to the next ``key=``)."""
    out: dict[str, object] = {}
    key = None
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            raise ArgumentError(f"params: --lora: an empty item in {spec!r}")
        if "=" in part:
            key, value = (t.strip() for t in part.split("=", 1))
            field = {"r": "lora_rank", "alpha": "lora_alpha", "targets": "lora_targets"}.get(
                key)
            if field in out:
                raise ArgumentError(f"params: --lora: {key} given twice in {spec!r}")
            if not value:
                raise ArgumentError(f"params: --lora: an empty item in {spec!r} ({key}=)")
        elif key == "targets":
            value = part
        else:
            raise ArgumentError(f"params: --lora: expected key=value items (r, alpha, "
                                f"targets), got {part!r}")
        if key not in ("r", "alpha", "targets"):
            raise ArgumentError(f"params: --lora: unknown key {key!r}: expected r, alpha or "
                                "targets")
        try:
            if key == "r":
                out["lora_rank"] = int(value)
            elif key == "alpha":
                out["lora_alpha"] = float(value)
            else:
                out["lora_targets"] = (*out.get("lora_targets", ()), value)  # type: ignore[misc]
        except ValueError:
            raise ArgumentError(f"params: --lora: {key}: not a number: {value!r}") from None
    if not out.get("lora_rank"):
        raise ArgumentError(f"params: --lora: expected r=RANK >= 1, got {spec!r}")
    return out
