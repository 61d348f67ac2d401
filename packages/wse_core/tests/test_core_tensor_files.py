"""`wse_core.host.tensor_files`: a safetensors checkpoint read into NumPy without JAX, equal to
safetensors' own loader, every non-finite tensor refused by name before a model sees it."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from wse_core.host.memory import HostMemoryError
from wse_core.host.tensor_files import INDEX_FILE, TensorFileError, read_tensors, weight_map
from wse_core.testing import refused_without_jax


def _tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(8).astype(ml_dtypes.bfloat16),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((4, 8)).astype(np.float16),
        "model.ids": np.arange(5, dtype=np.int64),
    }


def test_every_tensor_equals_safetensors_own_loader_and_buffers_are_not_read(tmp_path):
    saved = {**_tensors(), "h.0.attn.bias": np.full((1, 4), np.nan, np.float32)}
    save_file(saved, str(tmp_path / "model.safetensors"))
    got = read_tensors(tmp_path)
    oracle = load_file(str(tmp_path / "model.safetensors"))
    assert sorted(got) == sorted(set(oracle) - {"h.0.attn.bias"})  # a buffer: never read
    for name, x in got.items():
        assert x.dtype == oracle[name].dtype and x.shape == oracle[name].shape
        assert x.tobytes() == oracle[name].tobytes(), name


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_tensor_is_refused_by_name_with_its_count(tmp_path, bad):
    tensors = _tensors()
    w = tensors["model.layers.0.mlp.up_proj.weight"]
    w[1, :3] = bad
    save_file(tensors, str(tmp_path / "model.safetensors"))
    count = int(np.count_nonzero(~np.isfinite(w)))
    with pytest.raises(TensorFileError) as err:
        read_tensors(tmp_path)
    text = str(err.value)
    assert "'model.layers.0.mlp.up_proj.weight'" in text and "model.safetensors" in text
    assert f"holds {count:,} NaN or infinite values of {w.size:,}" in text
    assert "\n" not in text


def test_shards_of_an_index_are_read_and_a_missing_one_is_named(tmp_path):
    tensors = _tensors()
    names = sorted(tensors)
    shards = {"a.safetensors": names[:2], "b.safetensors": names[2:]}
    for f, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / f))
    wm = {k: f for f, keys in shards.items() for k in keys}
    (tmp_path / INDEX_FILE).write_text(json.dumps({"weight_map": wm}))
    assert weight_map(tmp_path) == {k: str(tmp_path / f) for k, f in wm.items()}
    got = read_tensors(tmp_path)
    assert all(got[k].tobytes() == tensors[k].tobytes() for k in names)
    (tmp_path / "b.safetensors").unlink()
    with pytest.raises(TensorFileError, match="names shard 'b.safetensors', missing from"):
        read_tensors(tmp_path)


def test_damaged_files_are_one_line_errors(tmp_path):
    with pytest.raises(TensorFileError, match=r"no \*.safetensors"):
        read_tensors(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(TensorFileError, match="not a readable safetensors file"):
        read_tensors(tmp_path)
    save_file(_tensors(), str(tmp_path / "model.safetensors"))
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-40])  # truncated data
    with pytest.raises(TensorFileError):
        read_tensors(tmp_path)


def test_files_beyond_host_memory_are_refused_before_reading(tmp_path, monkeypatch):
    save_file(_tensors(), str(tmp_path / "model.safetensors"))
    size = (tmp_path / "model.safetensors").stat().st_size
    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", str(size - 1))
    with pytest.raises(HostMemoryError, match=f"{size:,} B"):
        read_tensors(tmp_path)


def test_reading_imports_no_jax(tmp_path):
    tensors = _tensors()
    tensors["model.norm.weight"][0] = np.nan
    save_file(tensors, str(tmp_path / "model.safetensors"))
    got = refused_without_jax(
        "wse_core.host.tensor_files", f"read_tensors({str(tmp_path)!r})", "TensorFileError"
    )
    assert got == ["refused", "False"], got
