"""Hunt 75: ModelZoo's spellings met string distance ("model.max_position_embeddings: did you
mean 'tie_embeddings'?"). ModelZoo's GPT-2 / Llama model keys are HF's names of ours and move
to them (`MODELZOO_KEYS`; the oracle for the pairing: transformers' own GPT2Config, whose
`attribute_map` maps these HF names onto GPT-2's n_embd, n_layer, n_head, n_positions, and
LlamaConfig's intermediate_size); keys with no setting here, and 2.x's `trainer:` section,
are refused with what to do instead."""

from __future__ import annotations

import pytest
from wse_trainer.config import ConfigError, load_config
from wse_trainer.session import model_config

# HF's key -> (our key, the value given); each value differs from tiny-gpt2's default
GIVEN = {"hidden_size": ("d_model", 64), "num_hidden_layers": ("n_layers", 3),
         "num_heads": ("n_heads", 8), "filter_size": ("d_ff", 96),
         "max_position_embeddings": ("max_seq_len", 96)}  # fmt: skip


def test_hf_model_keys_move_to_ours_as_a_file_and_as_overrides(tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2Config(n_embd=64, n_layer=3, n_head=8, n_positions=96)
    for key, (_, value) in GIVEN.items():  # the oracle: HF reads these names so
        if key in hf.attribute_map:
            assert getattr(hf, key) == value
    overrides = [f"model.{k}={v}" for k, (_, v) in GIVEN.items()] + ["model.n_kv_heads=8"]
    model = model_config(load_config("tiny", overrides))
    for ours, value in GIVEN.values():
        assert getattr(model, ours) == value
    params = tmp_path / "p.yaml"
    params.write_text(
        "model:\n  preset: tiny-gpt2\n  num_attention_heads: 4\n  intermediate_size: 80\n"
    )
    llama = transformers.LlamaConfig(num_attention_heads=4, intermediate_size=80)
    model = model_config(load_config(str(params)))
    assert (model.n_heads, model.d_ff) == (llama.num_attention_heads, llama.intermediate_size)


def test_a_hf_key_and_ours_given_differently_are_refused(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("model:\n  hidden_size: 48\n  d_model: 32\n")
    with pytest.raises(ConfigError, match=r"^model.hidden_size gives model.d_model 48, and "):
        load_config(str(params))


@pytest.mark.parametrize("section", ["train_input", "eval_input"])
def test_drop_last_true_is_what_runs_and_false_is_refused(tmp_path, section):
    # session 80: drop_last true (ModelZoo's training default) was refused as having "no
    # equivalent" though it is what runs; the claim checked on the batches themselves: an
    # epoch of 10 rows in batches of 4 is 2 whole batches, 8 distinct rows, the 2 left out
    import numpy as np
    from wse_trainer.batches import BatchIterator
    from wse_trainer.config_check import config_notes

    it = BatchIterator(np.arange(20, dtype=np.int32).reshape(10, 2), 4, seed=0)
    epoch = [next(it) for _ in range(it.batches_per_epoch)]
    assert [b.shape for b in epoch] == [(4, 2)] * 2 and len({*np.concatenate(epoch)[:, 0]}) == 8
    config = load_config("tiny", [f"{section}.drop_last=true"])
    assert config == load_config("tiny")
    assert [n for n in config_notes(config) if "drop_last" in n and "partial batch" in n]
    with pytest.raises(ConfigError, match=r"drop_last false asks to keep an epoch's last "):
        load_config("tiny", [f"{section}.drop_last=false"])
    params = tmp_path / "p.yaml"
    params.write_text(f"{section}:\n  drop_last: 1\n")
    with pytest.raises(ConfigError, match=rf"^{section}.drop_last must be true or false, got 1"):
        load_config(str(params))


def test_a_2x_trainer_section_is_said_to_be_unread(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("trainer:\n  init:\n    seed: 1\n")
    with pytest.raises(ConfigError, match=r"^unknown section 'trainer' \(ModelZoo 2.x's "
                       r"trainer: format is not read; give the 1.x params sections "):  # fmt: skip
        load_config(str(params))
