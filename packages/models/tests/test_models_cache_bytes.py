"""cache_bytes is the size of the cache init_cache allocates, for every arch and dtype."""

import pytest
import wse_models
from wse_models.cache import cache_bytes


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_cache_bytes_equals_the_allocated_cache(arch, dtype):
    config = wse_models.preset_config(f"tiny-{arch}", n_layers=3)
    cache = wse_models.init_cache(config, 5, 17, dtype)
    assert cache_bytes(config, 5, 17, dtype) == cache.k.nbytes + cache.v.nbytes
