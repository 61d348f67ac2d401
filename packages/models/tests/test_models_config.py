"""ModelConfig: published parameter counts, analytic counts equal allocated trees, errors."""

import jax
import pytest
import wse_models as wm
from wse_models.testing import tiny_config

# Published totals (HF model cards / `sum(p.numel())` of the released checkpoints).
PUBLISHED = {
    "gpt2-124m": 124_439_808,
    "gpt2-355m": 354_823_168,
    "gpt2-774m": 774_030_080,
    "gpt2-1.5b": 1_557_611_200,
    "llama3-1b": 1_235_814_400,
    "llama3-3b": 3_212_749_824,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3-405b": 405_853_388_800,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_match_published(name):
    c = wm.preset_config(name)
    assert c.num_params() == PUBLISHED[name]
    # The shape tree (no allocation) agrees with the closed form.
    assert wm.tree_num_params(wm.param_shapes(c)) == PUBLISHED[name]
    assert c.param_bytes("bfloat16") == 2 * PUBLISHED[name]


@pytest.mark.parametrize(
    "config",
    [
        tiny_config("gpt2"),
        tiny_config("gpt2", tie_embeddings=False),
        tiny_config("llama"),
        tiny_config("llama", tie_embeddings=True, head_dim=8),
        wm.preset_config("tiny-gpt2"),
        wm.preset_config("tiny-llama"),
    ],
)
def test_counts_equal_allocated_tree(config):
    params = wm.init_params(config, jax.random.key(0))
    assert wm.tree_num_params(params) == config.num_params()
    one = wm.layer_slice(params["layers"], 0)
    assert wm.tree_num_params(one) == config.layer_params()
    cache = wm.init_cache(config, batch=3, max_len=5)
    per_token = (cache.k.nbytes + cache.v.nbytes) // (3 * 5)
    assert per_token == config.kv_bytes_per_token()
    assert all(x.dtype == config.param_dtype for x in jax.tree.leaves(params))


@pytest.mark.smoke
def test_flops_per_token_close_to_two_n():
    c = wm.preset_config("llama3-70b")
    f = c.flops_per_token(1)
    # Matmul weights: everything but the embedding table and the norms (untied head counts).
    norms = c.n_layers * 2 * c.d_model + c.d_model
    attn_one_key = 4 * c.n_layers * c.n_heads * c.hd
    assert f == 2 * (c.num_params() - c.embed_params() - norms) + attn_one_key
    assert c.flops_per_token(4097) - c.flops_per_token(1) == 4 * 80 * 64 * 128 * 4096
    assert c.train_flops_per_token(2048) == 3 * c.flops_per_token(1024)
    assert c.kv_bytes_per_token("bfloat16") == 80 * 2 * 8 * 128 * 2


def test_bad_configs_are_named():
    with pytest.raises(wm.ModelConfigError, match="did you mean 'llama3-8b'"):
        wm.preset_config("llama3-8")
    with pytest.raises(wm.ModelConfigError, match="n_kv_heads"):
        tiny_config("llama", n_kv_heads=3)
    with pytest.raises(wm.ModelConfigError, match="arch"):
        wm.ModelConfig(**{**tiny_config("gpt2").__dict__, "arch": "bert"})
    with pytest.raises(wm.ModelConfigError, match="dtype"):
        tiny_config("gpt2", dtype="float16")
    with pytest.raises(wm.ModelConfigError, match="grouped-query"):
        tiny_config("gpt2", n_kv_heads=2)
    with pytest.raises(wm.ModelConfigError, match="high_freq_factor"):
        wm.RopeScaling(factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0)
    from wse_core.errors import WseError

    assert issubclass(wm.CheckpointError, WseError)


def test_config_is_hashable_and_replace_validates():
    c = tiny_config("llama")
    assert hash(c) == hash(tiny_config("llama"))
    assert c.replace(dtype="bfloat16").dtype == "bfloat16"
    with pytest.raises(wm.ModelConfigError):
        c.replace(d_model=0)


def test_the_package_imports_its_modules_on_first_use():
    """`import wse_models` and a config (preset, HF config.json) need no JAX; every exported
    name resolves to the object its module defines, and a JAX name brings JAX in then."""
    import subprocess
    import sys

    probe = (
        "import sys, wse_models\n"
        "c = wse_models.preset_config('tiny-gpt2')\n"
        "h = wse_models.config_from_hf(wse_models.config_to_hf(c))\n"
        "print('jax' in sys.modules, (h.d_model, h.n_layers) == (c.d_model, c.n_layers))\n"
        "import importlib\n"
        "ok = all(getattr(wse_models, n) is (importlib.import_module('wse_models.' + n)\n"
        "    if n in ('layer', 'sparsity') else getattr(importlib.import_module(\n"
        "    'wse_models.' + wse_models._WHERE[n]), n)) for n in wse_models.__all__)\n"
        "print(ok, 'jax' in sys.modules, sorted(dir(wse_models)) == sorted(wse_models.__all__))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()  # fmt: skip
    assert out == ["False", "True", "True", "True", "True"], out
