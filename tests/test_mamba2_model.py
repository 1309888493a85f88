"""The independent JAX Mamba-2 model (nlaverify.models.jax_mamba2: the scan in its dual,
attention form) against Hugging Face's ``Mamba2ForCausalLM`` in float64 (its float32 casts
removed) and against the proved ops composed (``mamba2_scan``, ``gated_rmsnorm``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nlaverify.backends import get_namespace
from nlaverify.models import jax_mamba2 as m2
from nlaverify.ops import ssm2
from nlaverify.tolerance import tolerance

torch = pytest.importorskip("torch")
jax.config.update("jax_enable_x64", True)
NP = get_namespace("numpy")

SIZES = dict(vocab_size=40, hidden_size=16, expand=2, num_heads=8, head_dim=4, n_groups=2,
             state_size=3, conv_kernel=4, num_hidden_layers=2, chunk_size=4,
             layer_norm_epsilon=1e-5)


def _hf_model(seed: int, tied: bool = False):
    from transformers import Mamba2Config, Mamba2ForCausalLM

    torch.manual_seed(seed)
    model = Mamba2ForCausalLM(Mamba2Config(**SIZES, tie_word_embeddings=tied)).double().eval()
    with torch.no_grad():  # away from the initialisation's ones and zeros
        for name, q in model.named_parameters():
            if name.endswith(("norm.weight", "norm_f.weight", ".D")):
                q.add_(0.3 * torch.randn_like(q))
            elif name.endswith(("A_log", "dt_bias", "conv1d.bias")):
                q.copy_(0.5 * torch.randn_like(q))
    return model


def _exact(monkeypatch) -> None:
    """HF's float32 casts (``.float()``, ``.to(torch.float32)``) keep float64."""
    monkeypatch.setattr(torch.Tensor, "float", lambda self: self)
    original = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self if a and a[0] is
                        torch.float32 else original(self, *a, **k))


@pytest.mark.parametrize("tied", [False, True])
def test_model_equals_hugging_face(monkeypatch, tied) -> None:
    """Logits of 11 tokens (chunks of 4: a padded last chunk) and the loss: float64's
    rounding with HF's float32 casts removed, float32's with them."""
    model = _hf_model(0, tied)
    shape = m2.Mamba2Shape.from_hf(model.config)
    params = m2.params_from_hf({k: v.detach().numpy() for k, v in model.state_dict().items()},
                               shape, tied=tied)
    ids = np.random.default_rng(1).integers(0, 40, size=11)
    ours = np.asarray(m2.mamba2_logits(params, jnp.asarray(ids), shape))

    def theirs():
        with torch.no_grad():
            return model(torch.tensor(ids)[None]).logits[0].double().numpy()

    tol = tolerance("float64", size=16 * 11, depth=12)
    assert not tol.compare(theirs(), ours).ok
    assert tolerance("float32", size=16 * 11, depth=12).compare(theirs(), ours).ok
    _exact(monkeypatch)
    assert tol.compare(theirs(), ours).ok


def test_mixer_equals_the_proved_ops_composed() -> None:
    """The dual-form mixer equals ``mamba2_scan`` (the recurrence) and ``gated_rmsnorm`` run
    on the same projections, value by value at each recorded node."""
    model = _hf_model(2)
    shape = m2.Mamba2Shape.from_hf(model.config)
    p = m2.params_from_hf({k: v.detach().numpy() for k, v in model.state_dict().items()},
                          shape)
    u = np.random.default_rng(3).normal(size=(9, 16))
    rec: dict = {}
    m2.mamba2_mixer(p, "blocks.0.mamba2", jnp.asarray(u), shape, rec)
    q = {k: np.asarray(v) for k, v in p.items() if k.startswith("blocks.0.mamba2.")}
    r = {k.removeprefix("blocks.0.mamba2."): np.asarray(v) for k, v in rec.items()}
    n, H, P, G, N = 9, shape.n_heads, shape.head_dim, shape.n_groups, shape.state
    y = ssm2.mamba2_scan(NP, r["x"].reshape(n, H, P), r["in_dt"], q["blocks.0.mamba2.A_log"],
                         r["B"].reshape(n, G, N), r["C"].reshape(n, G, N),
                         q["blocks.0.mamba2.D"], q["blocks.0.mamba2.dt.b"]).reshape(n, H * P)
    tol = tolerance("float64", size=9 * 3, depth=6)
    assert tol.compare(y, r["y"]).ok and tol.compare(y.reshape(n, H, P), r["scan"]).ok
    normed = ssm2.gated_rmsnorm(NP, y, r["in_z"], q["blocks.0.mamba2.norm.gamma"], 1e-5,
                                H * P // G)
    assert tol.compare(normed, r["norm"]).ok


@pytest.mark.parametrize(("change", "key"), [
    ({"use_bias": True}, "use_bias"), ({"use_conv_bias": False}, "use_conv_bias"),
    ({"time_step_limit": (0.0, 0.05)}, "time_step_limit"),
    ({"time_step_limit": [0.001, float("inf")]}, "time_step_limit"),
    ({"hidden_act": "gelu"}, "hidden_act")])
def test_from_hf_refuses_unimplemented_options_by_key(change, key) -> None:
    """As the interop loader does: HF's biases, a bias-free convolution or a clamp of Delta
    would be dropped silently."""
    from transformers import Mamba2Config

    from nlaverify.config import ConfigError

    for config in ({**SIZES, **change}, Mamba2Config(**SIZES, **change)):
        with pytest.raises(ConfigError, match=rf"from_hf: field '{key}'"):
            m2.Mamba2Shape.from_hf(config)


def test_from_hf_accepts_the_defaults_written_out() -> None:
    """HF's defaults (and JSON's encoding of an infinite limit) are what the model computes."""
    shape = m2.Mamba2Shape.from_hf({**SIZES, "use_bias": False, "use_conv_bias": True,
                                    "time_step_limit": [0.0, {"__float__": "Infinity"}]})
    assert (shape.n_heads, shape.head_dim, shape.n_groups) == (8, 4, 2)


def test_params_from_hf_refuses_a_state_it_does_not_implement_by_key() -> None:
    """A state dict with projection biases or without the convolution's bias (a config not
    checked by ``from_hf``) is refused naming the key, not a raw ``KeyError``."""
    from nlaverify.config import ConfigError

    model = _hf_model(0)
    shape = m2.Mamba2Shape.from_hf(model.config)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    m2.params_from_hf(state, shape)
    key = "backbone.layers.1.mixer.in_proj.bias"
    with pytest.raises(ConfigError, match=rf"key '{key}'.*use_bias=True"):
        m2.params_from_hf({**state, key: np.zeros(3)}, shape)
    key = "backbone.layers.0.mixer.conv1d.bias"
    with pytest.raises(ConfigError, match=rf"key '{key}' is missing.*use_conv_bias=False"):
        m2.params_from_hf({k: v for k, v in state.items() if k != key}, shape)
