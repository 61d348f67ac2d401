"""Hunt 64: checkpoint folders `wse_core.host.tensor_files` read wrong. Before the fixes: an
index whose "weight_map" was a list, null, or held a number or a list as a file name was a
Python traceback (`'list' object has no attribute 'values'`, `unhashable type: 'list'`); an
FP8 (or FP4) checkpoint was `module 'numpy' has no attribute 'float8_e4m3fn'`; a second
*.safetensors holding the same tensor names silently replaced the weights (the sorted-last
file won); a header listing a million empty tensors was parsed and every entry read before
its names were found unused (20 s, 1.2 GB). Each is now a one-line `TensorFileError`."""

from __future__ import annotations

import json
import struct
import time

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors.numpy import load_file, save_file
from wse_core.host.tensor_files import (
    INDEX_FILE,
    TensorFileError,
    read_tensors,
    tensor_limit,
    weight_map,
)
from wse_core.testing import refused_without_jax

NAMES = ("lm_head.weight", "model.embed_tokens.weight", "model.norm.weight")


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {name: rng.standard_normal((4, 8)).astype(np.float32) for name in NAMES}


def _raw(path, tensors: dict[str, tuple[bytes, str, list[int]]], extra: int = 0) -> None:
    """A safetensors file written by hand: {name: (data, dtype name, shape)}, and `extra`
    empty F32 entries ("x0", "x1", ...) listed after them."""
    header, blob = {}, b""
    for name, (data, dtype, shape) in tensors.items():
        offsets = [len(blob), len(blob) + len(data)]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        blob += data
    empty = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    header |= {f"x{i}": empty for i in range(extra)}
    text = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob)


def _index(folder, weight_map) -> None:
    (folder / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))


WANT = (
    'model.safetensors.index.json\'s "weight_map" must be an object of tensor name -> shard '
    "file name, got "
)


@pytest.mark.parametrize(
    ("index", "words"),
    [({"weight_map": ["a"]}, WANT + "a list"),
     ({"weight_map": None}, WANT + "null"),
     ({"weight_map": "model.safetensors"}, WANT + "a string"),
     ({"weight_map": {"lm_head.weight": 5}}, WANT + "5 for 'lm_head.weight'"),
     ({"weight_map": {"lm_head.weight": ["model.safetensors"]}},
      WANT + "['model.safetensors'] for 'lm_head.weight'"),
     ([1, 2], 'model.safetensors.index.json must hold {"weight_map": an object of tensor name '
              "-> shard file name}, got a list"),
     ({"metadata": {}}, 'model.safetensors.index.json has no "weight_map" (an object of tensor '
                        "name -> shard file name)")],
    ids=["list", "null", "string", "number value", "list value", "index list", "no weight_map"],
)  # fmt: skip
def test_an_index_weight_map_of_the_wrong_shape_says_what_it_got(tmp_path, index, words):
    save_file(_tensors(), str(tmp_path / "model.safetensors"))
    (tmp_path / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(TensorFileError) as err:
        read_tensors(tmp_path)
    assert str(err.value) == words


def test_a_good_index_still_reads_its_shards(tmp_path):
    tensors = _tensors()
    save_file(tensors, str(tmp_path / "a.safetensors"))
    _index(tmp_path, dict.fromkeys(NAMES, "a.safetensors"))
    got = read_tensors(tmp_path, n_layers=0)
    assert {k: v.tobytes() for k, v in got.items()} == {k: v.tobytes() for k, v in tensors.items()}


F8 = np.arange(8, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).tobytes()


@pytest.mark.parametrize(
    ("dtype", "data", "shape"),
    [("F8_E4M3", F8, [8]), ("F8_E5M2", F8, [8]), ("F8_E8M0", F8, [8]), ("F4", F8[:4], [8]),
     ("F6_E2M3", F8[:6], [8])],
    ids=["F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3"],
)  # fmt: skip
def test_an_fp8_or_fp4_tensor_is_refused_by_name_before_any_data_is_read(tmp_path, dtype, data,
                                                                          shape):  # fmt: skip
    nan = np.full(4, np.nan, np.float32).tobytes()  # read first were data read: a NaN refusal
    tensors = {"a.weight": (nan, "F32", [4]), "b.weight": (data, dtype, shape)}
    _raw(tmp_path / "model.safetensors", tensors)
    with pytest.raises(TensorFileError) as err:
        read_tensors(tmp_path)
    assert str(err.value) == (
        f"tensor 'b.weight' in {tmp_path / 'model.safetensors'} is {dtype}; this loader reads "
        "F16, BF16, F32 and F64 checkpoints (dequantize an FP8, FP6 or FP4 checkpoint first)"
    )


def test_an_fp8_checkpoint_is_refused_without_importing_jax(tmp_path):
    _raw(tmp_path / "model.safetensors", {"w": (F8, "F8_E4M3", [8])})
    got = refused_without_jax(
        "wse_core.host.tensor_files", f"read_tensors({str(tmp_path)!r})", "TensorFileError"
    )
    assert got == ["refused", "False"], got


def test_every_read_floating_dtype_still_equals_safetensors_own_loader(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5))
    saved = {"f16": x.astype(np.float16), "bf16": x.astype(ml_dtypes.bfloat16),
             "f32": x.astype(np.float32), "f64": x}  # fmt: skip
    save_file(saved, str(tmp_path / "model.safetensors"))
    got, oracle = read_tensors(tmp_path, n_layers=0), load_file(str(tmp_path / "model.safetensors"))
    for name in saved:
        assert got[name].dtype == oracle[name].dtype
        assert got[name].tobytes() == oracle[name].tobytes(), name


def test_two_files_holding_one_tensor_name_both_and_the_tensor(tmp_path):
    tensors = _tensors()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    zeros = {"model.norm.weight": np.zeros((4, 8), np.float32)}
    save_file(zeros, str(tmp_path / "model2.safetensors"))
    message = (
        "tensor 'model.norm.weight' is in both model.safetensors and model2.safetensors; remove "
        "one (or add a model.safetensors.index.json saying which file holds each tensor)"
    )
    for call in (weight_map, read_tensors):
        with pytest.raises(TensorFileError) as err:
            call(tmp_path)
        assert str(err.value) == message
    # an index says which copy is meant: that one is read (transformers' rule with an index)
    _index(tmp_path, dict.fromkeys(NAMES, "model.safetensors"))
    got = read_tensors(tmp_path)
    assert got["model.norm.weight"].tobytes() == tensors["model.norm.weight"].tobytes()


def test_two_files_with_distinct_names_are_both_read(tmp_path):
    tensors = _tensors()
    save_file({k: tensors[k] for k in NAMES[:1]}, str(tmp_path / "a.safetensors"))
    save_file({k: tensors[k] for k in NAMES[1:]}, str(tmp_path / "b.safetensors"))
    assert sorted(read_tensors(tmp_path)) == sorted(NAMES)


LIMIT_2 = (
    "a checkpoint of 2 layers lists at most 48 (16 a layer, 16 besides): it is not this "
    "config's checkpoint"
)


def test_a_header_listing_far_more_tensors_than_the_layers_use_is_refused_unparsed(
    tmp_path, monkeypatch
):
    data = np.ones(4, np.float32).tobytes()
    _raw(tmp_path / "model.safetensors", {"lm_head.weight": (data, "F32", [4])}, extra=200_000)
    parsed = []
    monkeypatch.setattr(safetensors, "safe_open", lambda *a, **k: parsed.append(a))
    t0 = time.perf_counter()
    with pytest.raises(TensorFileError) as err:
        read_tensors(tmp_path, n_layers=2)
    assert time.perf_counter() - t0 < 2.0  # the header's text counted, not parsed
    assert not parsed  # safetensors never saw the header
    assert str(err.value) == f"model.safetensors lists 200,001 tensors; {LIMIT_2}"
    assert tensor_limit(2) == 48


def _refused(folder, **kw) -> str:
    with pytest.raises(TensorFileError) as err:
        read_tensors(folder, **kw)
    return str(err.value)


def test_the_tensor_count_limit_is_exact_and_applies_to_an_index_and_its_shards(tmp_path):
    data = np.ones(4, np.float32).tobytes()
    _raw(tmp_path / "model.safetensors", {"lm_head.weight": (data, "F32", [4])}, extra=47)
    assert len(read_tensors(tmp_path, n_layers=2)) == 48  # at the limit: read
    _raw(tmp_path / "model.safetensors", {"lm_head.weight": (data, "F32", [4])}, extra=48)
    assert len(read_tensors(tmp_path)) == 49  # no layer count given: no limit
    assert _refused(tmp_path, n_layers=2) == f"model.safetensors lists 49 tensors; {LIMIT_2}"
    # an index listing one name, whose shard's header lists 49
    _index(tmp_path, {"lm_head.weight": "model.safetensors"})
    assert _refused(tmp_path, n_layers=2) == f"model.safetensors lists 49 tensors; {LIMIT_2}"
    _index(tmp_path, {f"t{i}": "model.safetensors" for i in range(49)})
    assert _refused(tmp_path, n_layers=2) == f"{INDEX_FILE} lists 49 tensors; {LIMIT_2}"
