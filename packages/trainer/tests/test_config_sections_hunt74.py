"""Hunt 74 (train10): the config check refused a train run for its eval_input, a section the
run never reads: `wse train gpt2_124m runconfig.num_csx=64 train_input.batch_size=64
--validate-only` said "eval_input.batch_size=112 is not divisible by num_csx=64", and `wse
plan train` refused the params file on it.

Oracle: ModelZoo's modes, as documented: a section's batch must split over num_csx (its
microbatching page: "batch_size must be evenly divisible by num_csx", per dataloader) and
`train` builds only the training dataloader, `eval` only the evaluation one,
`train_and_eval` both. So each mode checks the fit to the run (num_csx, the micro-batch, the
model's sequence) of the sections it reads, and only those; a section's own values (a batch
of 0, an unknown split) are refused whatever the mode.
"""

from __future__ import annotations

import pytest
from wse_trainer.config import ConfigError, config_from_dict
from wse_trainer.config_check import check_config

READS = {"train": {"train_input"}, "eval": {"eval_input"},
         "train_and_eval": {"train_input", "eval_input"}}  # fmt: skip


def _config(mode: str, **sections):
    data = {"model": {"preset": "tiny-gpt2"}, "runconfig": {"mode": mode, "num_csx": 4},
            "train_input": {"batch_size": 8}, "eval_input": {"batch_size": 8}}  # fmt: skip
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    return config_from_dict(data)


def _refusal(config) -> str | None:
    try:
        check_config(config, model_max_seq_len=128)
    except ConfigError as e:
        return str(e)
    return None


@pytest.mark.parametrize("mode", list(READS))
@pytest.mark.parametrize("section", ["train_input", "eval_input"])
def test_a_batch_that_does_not_split_is_refused_only_where_the_mode_reads_it(mode, section):
    got = _refusal(_config(mode, **{section: {"batch_size": 6}}))
    if section in READS[mode]:
        assert got == (f"{section}.batch_size=6 is not divisible by num_csx=4; use a multiple "
                       "such as 4 or 8")  # fmt: skip
    else:
        assert got is None


@pytest.mark.parametrize("mode", list(READS))
@pytest.mark.parametrize("section", ["train_input", "eval_input"])
def test_a_micro_batch_and_a_sequence_are_checked_where_the_mode_reads_them(mode, section):
    micro = _refusal(_config(mode, **{section: {"micro_batch_size": 3}}))  # 2 per system
    seq = _refusal(_config(mode, **{section: {"max_sequence_length": 256}}))  # model: 128
    if section in READS[mode]:
        assert micro.startswith(f"{section}.micro_batch_size=3 does not divide")
        assert seq.startswith(f"{section}.max_sequence_length=256 exceeds")
    else:
        assert micro is None and seq is None


@pytest.mark.parametrize("mode", list(READS))
@pytest.mark.parametrize("section", ["train_input", "eval_input"])
def test_a_sections_own_values_are_refused_whatever_the_mode(mode, section):
    refused = {
        "batch_size": (0, f"{section}.batch_size must be positive, got 0"),
        "split": ("test", f"{section}.split='test' is not valid; choose one of: train, eval, all"),
        "micro_batch_size": ("x", f"{section}.micro_batch_size='x' is not valid; choose one of: "
                             "auto, explore, none"),
    }  # fmt: skip
    for key, (value, line) in refused.items():
        assert _refusal(_config(mode, **{section: {key: value}})) == line
