"""Hunt 64: `wse_models.from_pretrained` placed any tensor it was given. Before the fix a
checkpoint whose weights were stored as BOOL, I8 or C64 was cast to float32 and served
(bool weights generated one token over and over; complex ones only warned "ComplexWarning:
Casting complex values to real discards the imaginary part"); now each is a one-line
`CheckpointError` naming the tensor. Floating weights of every width still load, equal to
NumPy's cast. A header listing far more tensors than the config's layers use is refused
before safetensors parses it (`tensor_files.tensor_limit`, given the config's n_layers)."""

from __future__ import annotations

import json
import struct
import warnings

import jax
import ml_dtypes
import numpy as np
import pytest
import wse_models as wm
from safetensors.numpy import load_file, save_file
from wse_models.testing import tiny_config

CONFIG = tiny_config("llama")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    wm.save_params(CONFIG, wm.init_params(CONFIG, jax.random.key(0)), path)
    return path


def _copy_with(saved, tmp_path, cast) -> dict[str, np.ndarray]:
    """A copy of `saved` in `tmp_path` whose tensors are `cast(name, array)`; the originals."""
    tensors = load_file(str(saved / "model.safetensors"))
    (tmp_path / "config.json").write_text((saved / "config.json").read_text())
    save_file({k: cast(k, v) for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    return tensors


@pytest.mark.parametrize(
    ("dtype", "only", "named"),
    [(np.bool_, None, "model.embed_tokens.weight"),
     (np.int8, None, "model.embed_tokens.weight"),
     (np.uint8, "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"),
     (np.complex64, "model.norm.weight", "model.norm.weight")],
    ids=["BOOL", "I8", "U8 one tensor", "C64 one tensor"],
)  # fmt: skip
def test_a_weight_that_is_not_floating_point_is_refused_by_name(saved, tmp_path, dtype, only,
                                                                named):  # fmt: skip
    _copy_with(saved, tmp_path, lambda k, v: v.astype(dtype) if only in (None, k) else v)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the complex cast's ComplexWarning: not reached
        with pytest.raises(wm.CheckpointError) as err:
            wm.from_pretrained(tmp_path)
    assert str(err.value) == (
        f"tensor {named!r} is {np.dtype(dtype)}; model weights must be floating point "
        "(F16, BF16, F32 or F64)"
    )


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_floating_weights_of_every_width_load_as_numpys_cast(saved, tmp_path, dtype):
    tensors = _copy_with(saved, tmp_path, lambda k, v: v.astype(dtype))
    params = wm.from_pretrained(tmp_path).params()
    oracle = tensors["model.layers.0.self_attn.q_proj.weight"].astype(dtype).astype(np.float32)
    got = np.asarray(params["layers"]["attn"]["wq"][0])
    assert got.dtype == np.float32 and np.array_equal(got, oracle.T)  # nn.Linear: [out, in]


def test_a_header_listing_far_more_tensors_than_the_config_uses_is_refused_unread(saved, tmp_path):
    tensors = load_file(str(saved / "model.safetensors"))
    (tmp_path / "config.json").write_text((saved / "config.json").read_text())
    header, blob = {}, b""
    for name, x in tensors.items():
        data = x.astype(np.float32).tobytes()
        offsets = [len(blob), len(blob) + len(data)]
        header[name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": offsets}
        blob += data
    empty = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    header |= {f"x{i}": empty for i in range(100_000)}
    text = json.dumps(header, separators=(",", ":")).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + blob)
    limit = 16 * (CONFIG.n_layers + 1)
    with pytest.raises(wm.CheckpointError) as err:
        wm.from_pretrained(tmp_path)
    assert str(err.value) == (
        f"model.safetensors lists {len(tensors) + 100_000:,} tensors; a checkpoint of "
        f"{CONFIG.n_layers} layers lists at most {limit} (16 a layer, 16 besides): it is not "
        "this config's checkpoint"
    )
