"""check_model: the nanoGPT-style PyTorch and the Llama-style equinox examples verify node by
node (float64, float32 without false alarm), each planted bug is named at its node, and bad
input is a CheckError naming the argument."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("equinox")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import equinox_gpt  # noqa: E402
import nanogpt_torch  # noqa: E402

from nlaverify.check import CheckError, check_model  # noqa: E402
from nlaverify.check.model import chunk, compose, heads_first  # noqa: E402
from nlaverify.graph.run import sample_data  # noqa: E402

EXAMPLES = {"nanogpt": nanogpt_torch, "equinox": equinox_gpt}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_example_verifies(name: str, dtype: str) -> None:
    report = EXAMPLES[name].verify(None, dtype)
    assert report
    checks = [r.check for r in report.rows]
    # every node the example maps, the loss and every parameter's gradient ran
    assert "node logits" in checks and "node loss" in checks
    assert "node blocks.1.attn.heads" in checks
    assert sum(c.startswith("gradient ") for c in checks) >= 20
    assert all(r.verdict == "pass" for r in report.rows)


@pytest.mark.parametrize("name,plant", [(n, p) for n in sorted(EXAMPLES)
                                        for p in sorted(EXAMPLES[n].PLANTS)])
def test_planted_bug_named_at_its_node(name: str, plant: str) -> None:
    mod = EXAMPLES[name]
    report = mod.verify(plant, "float64", gradients=False)  # the values name it
    assert not report.ok
    node = mod.PLANTS[plant]
    assert report.first_failure.check == f"node {node}", report
    assert report.first_failure.where.startswith(node)
    assert report.first_failure.ratio > 1e3  # far beyond the bound, not a rounding quarrel
    assert any(n.startswith(f"first divergent node: {node}") for n in report.notes)
    # every node before it agrees: the bug is located, not merely detected
    rows = [r.check for r in report.rows]
    assert all(r.verdict == "pass" for r in report.rows[:rows.index(f"node {node}")])


@pytest.mark.parametrize("name,plant", [("nanogpt", p) for p in sorted(nanogpt_torch.PLANTS)]
                         + [("equinox", "swiglu")])
def test_planted_bug_named_in_float32(name: str, plant: str) -> None:
    """In float32 too, by the derived per-node bounds: the tanh GELU for the exact one (about
    650x the clean error) passes every node under the linear bound (about 1800x above the
    error), and fails at its node under the derived one (30x to 46x over seeds 0-9)."""
    mod = EXAMPLES[name]
    report = mod.verify(plant, "float32", gradients=plant == "scale")
    assert report.first_failure.check == f"node {mod.PLANTS[plant]}", report
    assert report.first_failure.ratio > 10.0  # beyond the bound, not at its edge


def test_float32_bounds_are_derived_and_zero_gradients_still_judged() -> None:
    """float32 nodes get the per-node bounds of nlaverify.precision (random composition,
    relative to the node's own size); the key bias's gradient, zero up to rounding (derived
    bound >= 1), is judged by the linear bound against the unit scale, not skipped."""
    from nlaverify.check.model import _compare_model

    data = sample_data(23, 8, 0)
    c = nanogpt_torch.GPTConfig()
    mc = _compare_model(nanogpt_torch.GPT(c).float(), nanogpt_torch.graph_config(c), None,
                        data["tokens"], targets=data["targets"], load=nanogpt_torch.load,
                        intermediates=nanogpt_torch.intermediates(c),
                        call=lambda m, x, y: m(x, y))
    rows = {r.check: r for r in mc.report.rows}
    act = rows["node blocks.0.mlp.act"]
    assert "sqrt(D=" in act.reason and act.bound < 1e-4  # random composition, derived
    assert act.bound * 10 < mc.bound.linear("float32", "blocks.0.mlp.act", False).rtol
    b_k = rows["gradient blocks.0.attn.k.b_K"]
    assert b_k.verdict == "pass" and "the derived bound" in b_k.reason, b_k
    # a nonzero key-bias gradient (a bug the derived bound alone would skip) fails it
    tol, floor = mc.bound("blocks.0.attn.k.b_K", True)
    assert floor == 1.0 and tol.rtol < 1e-2
    assert not tol.compare(mc.ev.cotangents["blocks.0.attn.k.b_K"] + 0.1, mc.ev.cotangents[
        "blocks.0.attn.k.b_K"], floor=floor).ok


def test_matmul_products_follow_the_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    """TF32/bfloat16 matmul operands, where the framework is set to them, enter the float32
    bounds (a GPU's default TF32 would otherwise be a false alarm at every matmul)."""
    import jax

    from nlaverify.check.model_run import _matmul_products

    assert _matmul_products("jax", "float32") is None  # CPU: full float32 products
    assert _matmul_products("torch", "float32") is None
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert _matmul_products("jax", "float32") == "tfloat32"
    assert _matmul_products("jax", "float64") is None
    with jax.default_matmul_precision("highest"):
        assert _matmul_products("jax", "float32") is None
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert _matmul_products("jax", "float32") == "bfloat16"
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert _matmul_products("torch", "float32") == "tfloat32"
        torch.set_float32_matmul_precision("medium")
        assert _matmul_products("torch", "float32") == "bfloat16"
    finally:
        torch.set_float32_matmul_precision(before)
    from nlaverify.check import model as model_mod

    monkeypatch.setattr(model_mod, "_matmul_products", lambda fw, dt: "tfloat32")
    report = nanogpt_torch.verify(None, "float32", gradients=False)
    heads = next(r for r in report.rows if r.check == "node blocks.0.attn.heads")
    assert "u_prod(tfloat32)" in heads.reason and report, report


def test_main_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert nanogpt_torch.main([]) == 0
    assert nanogpt_torch.main(["--plant", "scale"]) == 0  # the plant was found at its node
    out = capsys.readouterr().out
    assert "expected at 'node blocks.0.attn.heads', found at 'node blocks.0.attn.heads'" in out


def test_wrong_gradient_is_named() -> None:
    """A bug only the backward shows: a straight-through clamp whose forward is the identity
    on these values but whose gradient is zero (detached): every value passes, the gradients
    of the parameters before it fail."""
    c = nanogpt_torch.GPTConfig()
    model = nanogpt_torch.GPT(c).double()

    class Detach(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.detach()

    model.transformer.drop = Detach()  # x0 reaches the blocks without its gradient
    data = sample_data(c.vocab_size, 8, 0)
    report = check_model(model, nanogpt_torch.graph_config(c), None, data["tokens"],
                         targets=data["targets"], load=nanogpt_torch.load,
                         intermediates=nanogpt_torch.intermediates(c),
                         call=lambda m, x, y: m(x, y))
    assert all(r.verdict == "pass" for r in report.rows if r.check.startswith("node "))
    assert report.first_failure.check == "gradient embed.W_E"
    assert {r.check for r in report.failures} >= {"gradient embed.W_E", "gradient pos.W_P"}


# --- a JAX function model (no equinox), intermediates keyed by graph node -------------------

def _jax_model():
    import jax.numpy as jnp

    from nlaverify.config import TransformerConfig

    config = TransformerConfig(vocab_size=13, d_model=8, n_heads=2, n_blocks=1, d_mlp=16,
                               context=8, norm="rmsnorm", positions="none", mlp="relu",
                               final_norm=False, name="tiny-jax")

    def rms(x, g):
        return g * x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + config.norm_eps)

    def model(p, tokens):
        x = p["embed.W_E"][tokens]
        h = rms(x, p["blocks.0.norm1.gamma"])
        q, k, v = (h @ p[f"blocks.0.attn.{s}.W_{s.upper()}"] for s in "qkv")
        n = x.shape[0]
        qh, kh, vh = (a.reshape(n, 2, 4).transpose(1, 0, 2) for a in (q, k, v))
        s = qh @ kh.transpose(0, 2, 1) / 2.0
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
        w = jnp.exp(s - s.max(-1, keepdims=True))
        heads = (w / w.sum(-1, keepdims=True)) @ vh
        x = x + heads.transpose(1, 0, 2).reshape(n, 8) @ p["blocks.0.attn.out.W_O"]
        m = jnp.maximum(rms(x, p["blocks.0.norm2.gamma"]) @ p["blocks.0.mlp.in.W_in"], 0)
        x = x + m @ p["blocks.0.mlp.out.W_out"]
        return x @ p["unembed.W_U"], {"blocks.0.norm1": h, "blocks.0.attn.heads": heads,
                                      "blocks.0.resid2": x}
    return config, model


def test_jax_function_identity_map() -> None:
    config, model = _jax_model()
    report = check_model(model, config, None, np.arange(6) % 13, framework="jax")
    assert report, report
    checks = [r.check for r in report.rows]
    assert checks[:3] == ["node blocks.0.norm1", "node blocks.0.attn.heads",
                          "node blocks.0.resid2"]
    assert any(n.startswith("graph nodes your model does not expose") for n in report.notes)


def test_layout_helpers() -> None:
    a = np.arange(2 * 3 * 12).reshape(2 * 3, 12).astype(float)  # (n=6, [q|k|v] of 2 heads)
    k = compose(chunk(1, 3), heads_first(2))(a)
    assert k.shape == (2, 6, 2)
    np.testing.assert_array_equal(k[1, 4], a[4, 6:8])  # head 1 of K is columns 4+2..4+4
    heads_last = a[:, :4].reshape(6, 2, 2)  # (n, H, d_h), as most code holds heads
    np.testing.assert_array_equal(heads_first(2)(heads_last), heads_last.transpose(1, 0, 2))


# --- bad input ------------------------------------------------------------------------

def _nano(**kw):
    c = nanogpt_torch.GPTConfig()
    model = nanogpt_torch.GPT(c).double()
    data = sample_data(c.vocab_size, 8, 0)
    args = dict(targets=data["targets"], load=nanogpt_torch.load,
                intermediates=nanogpt_torch.intermediates(c), call=lambda m, x, y: m(x, y))
    args.update(kw)
    return check_model(model, nanogpt_torch.graph_config(c), None, data["tokens"], **args)


def test_unknown_module_names_the_argument() -> None:
    with pytest.raises(CheckError, match=r"'intermediates'.*no module 'transformer\.h\.0\.ln1'"):
        _nano(intermediates={"blocks.{l}.norm1": "transformer.h.{l}.ln1"})


def test_unknown_node_names_the_argument() -> None:
    with pytest.raises(CheckError, match=r"'intermediates'.*'blocks\.0\.norm_1' is not an op"):
        _nano(intermediates={"blocks.{l}.norm_1": "transformer.h.{l}.ln_1"})


def test_wrong_intermediate_shape_names_the_node() -> None:
    # the attention heads read without the heads-first layout: (n, d), not (H, n, d_h)
    with pytest.raises(CheckError, match=r"'intermediates'.*'blocks\.0\.attn\.heads'.*"
                                         r"expected shape \(2, 8, 4\).*got \(8, 8\)"):
        _nano(intermediates={"blocks.{l}.attn.heads": "transformer.h.{l}.attn.c_proj:input"})


def test_model_that_raises_names_the_argument() -> None:
    def boom(m, x, y):
        raise RuntimeError("shape mismatch in my attention")
    with pytest.raises(CheckError, match=r"argument 'model': raised RuntimeError.*my attention"):
        _nano(call=boom)


def test_non_array_output_names_the_output() -> None:
    with pytest.raises(CheckError, match=r"output of model: expected logits, a torch\.Tensor"):
        _nano(call=lambda m, x, y: ("logits", None))
    config, _ = _jax_model()
    with pytest.raises(CheckError, match=r"output of model: expected logits, an array"):
        check_model(lambda p, t: ([1.0], {}), config, None, np.arange(6), framework="jax")


def test_bad_load_names_the_argument() -> None:
    def partial(model, p):
        s = nanogpt_torch.load(model, p)
        s.pop("transformer.wpe.weight")
        return s
    with pytest.raises(CheckError, match=r"'load': no weight for the model's parameter "
                                         r"'transformer\.wpe\.weight'"):
        _nano(load=partial)
    with pytest.raises(CheckError, match=r"'load': weight 'transformer\.wpe\.weight': expected "
                                         r"shape \(16, 8\), got \(8, 16\)"):
        _nano(load=lambda m, p: {**nanogpt_torch.load(m, p),
                                 "transformer.wpe.weight": p["pos.W_P"].T.contiguous()})
    with pytest.raises(CheckError, match=r"argument 'load': a PyTorch model needs"):
        _nano(load=None)


def test_bad_tokens_and_config() -> None:
    with pytest.raises(CheckError, match=r"argument 'tokens': expected ids in \[0, vocab_size"):
        check_model(*_jax_model()[::-1], None, np.array([0, 99]), framework="jax")
    with pytest.raises(CheckError, match=r"argument 'config': expected a TransformerConfig"):
        check_model(_jax_model()[1], {"d_model": 8}, None, np.arange(4), framework="jax")
    config, model = _jax_model()
    with pytest.raises(CheckError, match=r"'intermediates'.*have no key 'h1'"):
        check_model(model, config, None, np.arange(6), framework="jax",
                    intermediates={"blocks.0.norm1": "h1"})


# --- a batch of padded sequences (as ``nlaverify verify --preset tiny --batch 3``) ------------

def _nano_batch(call, plant=None, dtype="float64"):
    c = nanogpt_torch.GPTConfig(plant=plant)
    model = nanogpt_torch.GPT(c).to(getattr(torch, dtype))
    data = sample_data(c.vocab_size, 8, 0, batch=3)  # rows of 8, 7, 6 real tokens
    return check_model(model, nanogpt_torch.graph_config(c), None, data["tokens"],
                       targets=data["targets"], load=nanogpt_torch.load,
                       intermediates=nanogpt_torch.intermediates(c), call=call,
                       gradients=plant is None)


def _ignore_as_minus_one(m, x, y):  # nanoGPT's loss ignores -1, the graph's -100
    return m(x, torch.where(y == -100, -1, y))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_padded_batch_verifies(dtype: str) -> None:
    report = _nano_batch(_ignore_as_minus_one, dtype=dtype)
    assert report, report
    heads = next(r for r in report.rows if r.check == "node blocks.1.attn.heads")
    assert heads.where.count(",") == 3  # (B, H, n, d_h): the batch axis is compared
    assert any("a batch of 3 sequences of 8 tokens" in n for n in report.notes)


def test_padded_batch_names_the_plant_and_the_padding_bug() -> None:
    report = _nano_batch(_ignore_as_minus_one, plant="mask")
    assert report.first_failure.check == "node blocks.0.attn.heads", report
    # the loss taken over the padding too (its targets read as token 0): only the loss fails
    report = _nano_batch(lambda m, x, y: m(x, torch.where(y == -100, 0, y)))
    assert [r.check for r in report.failures][:1] == ["node loss"], report
    assert all(r.verdict == "pass" for r in report.rows if r.check.startswith("node ")
               and r.check != "node loss")


def test_batch_bad_targets_named() -> None:
    c = nanogpt_torch.GPTConfig()
    data = sample_data(c.vocab_size, 8, 0, batch=2)
    with pytest.raises(CheckError, match=r"'targets': expected shape \(2, 8\)"):
        check_model(nanogpt_torch.GPT(c).double(), nanogpt_torch.graph_config(c), None,
                    data["tokens"], targets=data["targets"][0], load=nanogpt_torch.load)


# --- hostile models and inputs (review of check_model) ---------------------------------------

@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("seed", [1, 2])
def test_example_verifies_in_bfloat16(name: str, seed: int) -> None:
    """No false alarm in bfloat16 over seeds (the per-node bounds of nlaverify.precision)."""
    report = EXAMPLES[name].verify(None, "bfloat16", seed, gradients=False)
    assert report, report
    assert sum(r.verdict == "pass" for r in report.rows) >= 20


class _InPlaceGelu(torch.nn.Module):
    """The exact GELU :math:`x\\Phi(x)` computed into its input (as ``ReLU(inplace=True)``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(torch.special.ndtr(x))


def test_input_of_an_in_place_module_is_read_before_it_runs() -> None:
    """``module:input`` of a module that overwrites its input: read after the forward it
    would be the module's output (a false alarm at mlp.in); a pre-hook reads it first."""
    c = nanogpt_torch.GPTConfig()
    model = nanogpt_torch.GPT(c).double()
    for block in model.transformer.h:
        block.mlp.gelu = _InPlaceGelu()
    inter = {**nanogpt_torch.intermediates(c),
             "blocks.{l}.mlp.in": "transformer.h.{l}.mlp.gelu:input"}
    data = sample_data(c.vocab_size, 8, 0)
    report = check_model(model, nanogpt_torch.graph_config(c), None, data["tokens"],
                         targets=data["targets"], load=nanogpt_torch.load, intermediates=inter,
                         call=lambda m, x, y: m(x, y), gradients=False)
    assert report, report
    assert "node blocks.1.mlp.in" in [r.check for r in report.rows]


def test_model_changing_its_ids_in_place() -> None:
    """A model that rewrites its targets (say -100 -> 0) after its forward: the check's loss
    still uses the targets it was given (no false alarm) and the report says so; a model that
    rewrites its ids before the forward computes something else, named at the embedding."""
    def rewrites_targets(m, x, y):
        logits, _ = m(x, y)
        y.fill_(0)
        return logits

    report = _nano(call=rewrites_targets)
    assert report, report
    assert any("changed its targets in place" in n for n in report.notes)

    def rewrites_ids(m, x, y):
        x[0, 0] = (x[0, 0] + 1) % 23
        return m(x, y)

    report = _nano(call=rewrites_ids)
    assert report.first_failure.check == "node embed", report
    assert report.first_failure.where == "embed[0, 0]"

    config, model = _jax_model()
    tokens = np.arange(6) % 13

    def numpy_model(p, t):  # runs the JAX model, then zeroes its (NumPy) ids
        out = np.asarray(model({k: np.asarray(v) for k, v in p.items()}, np.asarray(t))[0])
        t[...] = 0
        return out

    from nlaverify.check.model import _compare_model

    mc = _compare_model(numpy_model, config, None, tokens, framework="numpy")
    assert mc.report and np.array_equal(mc.data["tokens"], tokens)
    assert any("changed its input ids in place" in n for n in mc.report.notes)


def test_node_mapped_twice_is_refused() -> None:
    c = nanogpt_torch.GPTConfig()
    with pytest.raises(CheckError, match=r"'intermediates': node 'blocks\.0\.norm1' is mapped "
                                         r"twice, by 'blocks\.\{l\}\.norm1' and by "
                                         r"'blocks\.0\.norm1'"):
        _nano(intermediates={**nanogpt_torch.intermediates(c),
                             "blocks.0.norm1": "transformer.h.0.ln_2"})


def test_tied_weights_given_two_tensors_names_load() -> None:
    """nanoGPT ties wte and lm_head; a load (for an untied config) giving each its own
    tensor is refused naming 'load', not as an error of the model."""
    with pytest.raises(CheckError, match=r"argument 'load': the model ties "
                                         r"'transformer\.wte\.weight' and 'lm_head\.weight'"):
        _nano(load=lambda m, p: {**nanogpt_torch.load(m, p),
                                 "lm_head.weight": p["embed.W_E"] * 1.0})


def test_logits_of_the_wrong_kind_are_named() -> None:
    with pytest.raises(CheckError, match=r"output of model: expected floating logits"):
        _nano(call=lambda m, x, y: m(x, y)[0].long())
    # nanoGPT without targets: the logits of the last position only
    with pytest.raises(CheckError, match=r"output of model: expected logits of shape "
                                         r"\(1, 8, 23\).*got \(1, 1, 23\)"):
        _nano(call=lambda m, x, y: m(x)[0])
    config, model = _jax_model()
    with pytest.raises(CheckError, match=r"output of model: expected logits of shape \(6, 13\)"):
        check_model(lambda p, t: model(p, t)[0][:, :5], config, None, np.arange(6),
                    framework="jax")


def test_torch_call_returning_logits_and_intermediates() -> None:
    """``call`` may return ``(logits, intermediates)`` without a loss: its keys are mapped."""
    c = nanogpt_torch.GPTConfig()

    def call(m, x, y):
        logits, _ = m(x, y)
        return logits, {"my_logits": logits}

    report = _nano(call=call, intermediates={**nanogpt_torch.intermediates(c),
                                             "logits": "my_logits"})
    assert report, report
    logits = next(r for r in report.rows if r.check == "node logits")
    assert "['my_logits']" in logits.reason


def test_jax_default_map_with_a_stray_key_names_the_output() -> None:
    config, model = _jax_model()
    with pytest.raises(CheckError, match=r"output of model: intermediates key 'debug' is not "
                                         r"an op node"):
        check_model(lambda p, t: (model(p, t)[0], {**model(p, t)[1], "debug": 3}), config,
                    None, np.arange(6), framework="jax")


def test_a_call_that_switches_to_training_mode_is_named() -> None:
    """A call that puts the model in training mode makes its dropout random: named as the
    argument 'call' (was: a false alarm at some node), only when a random layer is active."""
    import dataclasses

    c = dataclasses.replace(nanogpt_torch.GPTConfig(), dropout=0.1)
    model = nanogpt_torch.GPT(c).double()
    data = sample_data(c.vocab_size, 8, 0)

    def train_mode(m, x, y):
        m.train()
        return m(x, y)

    with pytest.raises(CheckError, match=r"argument 'call': it put the model in training mode"):
        check_model(model, nanogpt_torch.graph_config(c), None, data["tokens"],
                    targets=data["targets"], load=nanogpt_torch.load, call=train_mode)
    # without dropout, training mode changes nothing: no error
    report = _nano(call=train_mode)
    assert report.ok, report
