"""The sharded pipeline: a Transformer graph lowered with a mesh and a sharding plan
(``dp``, ``fsdp``, ``tp``, ``sp`` and their combinations) to one ``jax.jit`` whose values
and cotangents carry sharding constraints, run on simulated CPU devices and compared node by
node with the unsharded graph (``nlaverify verify --preset NAME --mesh dp=2,tp=2``).

:mod:`~nlaverify.shard.plan` checks a mesh against a config (no JAX: a bad mesh is an error
before anything runs) and lays out every node; :mod:`~nlaverify.shard.run` runs and compares
in the current process; :mod:`~nlaverify.shard.command` runs it in a subprocess that
simulates the devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N``)."""

from nlaverify.shard.command import existing_devices, format_report, run_shard_verify
from nlaverify.shard.plan import AXES, MeshPlan, layout, parse_mesh, plan_mesh
from nlaverify.shard.run import PLANTS, ShardReport, ShardRow, shard_verify

__all__ = ["AXES", "PLANTS", "MeshPlan", "ShardReport", "ShardRow", "existing_devices",
           "format_report", "layout", "parse_mesh", "plan_mesh", "run_shard_verify",
           "shard_verify"]
