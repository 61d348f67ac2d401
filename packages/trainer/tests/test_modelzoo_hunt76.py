"""Hunt 76: a ModelZoo user's params met our meanings where ModelZoo's differ.

1. `wse train` kept the last 3 checkpoints unsaid and refused `runconfig.max_checkpoints`;
   ModelZoo keeps every one unless `max_checkpoints` says how many (`run_cstorch_flow`:
   "Default to keeping all checkpoints"; `CkptInfo.update` deletes only while it is set).
2. `checkpoint_steps: 0` / `null` and `log_steps: 0` were refused; ModelZoo saves no
   periodic checkpoint (ours: the last step still) and logs the final step alone.
3. An explicit `micro_batch_size: null` ran as auto; ModelZoo reads a missing key as "auto"
   and None as "disable micro batch tiling" (the whole per-system batch).
4. `train_input.packing` moved no prediction; the run now prices its packed rows' attention.
5. ModelZoo's GPT-2 model keys: `test_modelzoo_model_keys_hunt76`.

Oracles: ModelZoo's documented rules, reimplemented here from its source (the checkpoints
`CkptInfo.update` keeps, `is_log_step`, the effective micro-batch of
`validate_train_and_eval_micro_batch_size`), attention pairs
counted by a plain loop over each row's documents, and `predict_step` itself.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from wse_core import preset
from wse_trainer.cadence import keep_note
from wse_trainer.config import ConfigError, config_from_dict, load_config, shipped_config
from wse_trainer.predicted import run_lines, saves_note
from wse_trainer.session import Session, micro_batch, model_config, predict, validate
from wse_trainer.testing import run_on_preset, tiny_config, tiny_params, write_corpus

# ModelZoo's own rules ---------------------------------------------------------------------


def zoo_kept(saves: list[int], max_checkpoints: int | None) -> list[int]:
    """The checkpoints ModelZoo keeps of `saves` (`CkptInfo.update(path, max_store)`)."""
    info: list[int] = []
    for step in saves:
        info.append(step)
        while max_checkpoints and len(info) > max_checkpoints:
            info.pop(0)
    return info


def zoo_saves(max_steps: int, checkpoint_steps: int | None) -> list[int]:
    """The steps cstorch's executor checkpoints: every checkpoint_steps and the final one;
    None or 0: none."""
    if not checkpoint_steps:
        return []
    return [s for s in range(1, max_steps + 1) if s % checkpoint_steps == 0 or s == max_steps]


def zoo_logged(max_steps: int, log_steps: int) -> set[int]:
    """ModelZoo's `is_log_step`: the final iteration, or every `log_steps` when set."""
    steps = range(1, max_steps + 1)
    return {s for s in steps if s == max_steps or (log_steps and not s % log_steps)}


def _on_disk(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in (model_dir / "checkpoints").iterdir() if p.name.isdigit())


def _logged(model_dir: Path) -> set[int]:
    text = (model_dir / "run.log").read_text()
    return {int(m) for m in re.findall(r"\| Train Device=CSX, Step=(\d+),", text)}


# 1, 2: checkpoints kept and lines logged ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("given", "max_steps", "keep", "log_steps"),
    [((), 3, None, 0), (("runconfig.max_checkpoints=2",), 4, 2, 2)],
)
def test_checkpoints_kept_and_lines_logged_as_modelzoo_counts_them(
    tmp_path, given, max_steps, keep, log_steps
):
    config = tiny_config(tmp_path, f"runconfig.max_steps={max_steps}",
                         "runconfig.checkpoint_steps=1", f"runconfig.log_steps={log_steps}",
                         *given)  # fmt: skip
    assert config.runconfig.keep_checkpoint_max == keep
    run_on_preset(config)
    model_dir = tmp_path / "model_dir"
    assert _on_disk(model_dir) == zoo_kept(zoo_saves(max_steps, 1), keep)
    assert _logged(model_dir) == zoo_logged(max_steps, log_steps)
    log = (model_dir / "run.log").read_text()
    deleted = sorted(set(zoo_saves(max_steps, 1)) - set(zoo_kept(zoo_saves(max_steps, 1), keep)))
    if keep is None:
        assert "keeping the newest" not in log and " kept, older ones deleted" not in log
    else:  # said once, at the start, naming the steps that go
        assert (
            deleted == [1, 2]
            and "; the newest 2 kept (runconfig.keep_checkpoint_max), older ones deleted" in log
        )
        assert (
            "note: keeping the newest 2 checkpoints (runconfig.keep_checkpoint_max): this run "
            "deletes 2 of its folder's 4 checkpoints as newer ones are saved, oldest first: "
            "steps 1, 2;"
        ) in log
    saved = yaml.safe_load((model_dir / "train" / "params_train.yaml").read_text())
    assert saved["runconfig"]["log_steps"] == log_steps  # as given, not the loop's period


@pytest.mark.slow
def test_zero_and_null_save_the_last_step_alone_and_null_micro_batch_is_the_whole_batch(
    tmp_path,
):
    """checkpoint_steps null (a file) and 0 (an override): no periodic checkpoint, the last
    step alone (ModelZoo saves none: the difference is ours, said in the docs); a file's
    micro_batch_size null runs the per-system batch at once, ModelZoo's disabled tiling,
    and trains to the same losses as that batch given as an int."""
    corpus = write_corpus(tmp_path / "data")
    params = tiny_params(corpus, tmp_path / "null")
    params["runconfig"].update(max_steps=2, checkpoint_steps=None)
    params["train_input"]["micro_batch_size"] = None
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    null = load_config(path)
    assert null.train_input.micro_batch_size == "none"
    per_system = params["train_input"]["batch_size"] // null.runconfig.num_csx
    zoo_micro = per_system if params["train_input"]["micro_batch_size"] is None else None
    as_int = load_config(path, [f"runconfig.model_dir={tmp_path / 'int'}",
                                "runconfig.checkpoint_steps=0",
                                f"train_input.micro_batch_size={zoo_micro}"])  # fmt: skip
    spec = preset("small")
    model = model_config(null)
    assert micro_batch(null, spec, model) == zoo_micro == micro_batch(as_int, spec, model)
    first, second = run_on_preset(null), run_on_preset(as_int)
    assert first.losses == second.losses and sorted(first.losses) == [1, 2]
    for folder in ("null", "int"):
        assert _on_disk(tmp_path / folder) == [2]  # zoo_saves(2, None) == [], plus the last
    assert zoo_saves(2, None) == zoo_saves(2, 0) == []
    saved = tmp_path / "null" / "train" / "params_train.yaml"
    again = load_config(saved)  # the saved params rerun as given
    assert again.runconfig.checkpoint_steps is None and again == null


# 3: micro_batch_size absent vs null -----------------------------------------------------


def test_absent_micro_batch_is_auto_and_null_is_modelzoos_disabled_tiling():
    data = yaml.safe_load(shipped_config("llama3_8b").read_text())
    data["train_input"].pop("micro_batch_size", None)
    data["train_input"]["batch_size"] = 256  # the tester's repro: 64 a system, auto fits 16
    absent = config_from_dict(data)
    data["train_input"]["micro_batch_size"] = None
    null = config_from_dict(data)
    assert (absent.train_input.micro_batch_size, null.train_input.micro_batch_size) == (
        "auto", "none")  # fmt: skip
    spec, model = preset("wse3"), model_config(null)
    per_system = data["train_input"]["batch_size"] // data["runconfig"]["num_csx"]
    assert micro_batch(null, spec, model) == per_system  # ModelZoo: train_bs if mbs is None
    from wse_systems.training.micro_batch import resolve_micro_batch

    run = absent.runconfig
    auto = resolve_micro_batch("auto", model, spec, batch_per_system=per_system,
                               seq_len=absent.train_input.max_sequence_length,
                               stride=run.activation_stride, chunks=run.weight_chunks)  # fmt: skip
    assert micro_batch(absent, spec, model) == auto < per_system


# 4: packing's prediction ------------------------------------------------------------------


def loop_pairs(rows: np.ndarray, eos_id: int) -> float:
    """Causal (query, key) pairs per row when each input attends within its document: an EOS
    opens a document (`data.segments`' rule), a document of n inputs holds n (n + 1) / 2."""
    total = 0
    for row in rows.tolist():
        inputs, n = row[:-1], 0
        for token in inputs:
            if token == eos_id and n:
                total += n * (n + 1) // 2
                n = 0
            n += 1
        total += n * (n + 1) // 2
    return total / len(rows)


def test_a_packed_run_prices_the_attention_pairs_of_its_rows(tmp_path):
    from wse_systems.training.performance import Sparsity, StepLayout, predict_step
    from wse_trainer.run_lock import release

    seq = 64
    config = tiny_config(tmp_path, "train_input.packing=true",
                         f"train_input.max_sequence_length={seq}")  # fmt: skip
    spec = preset("small")
    s = Session(config, spec, None)
    try:
        rows = s.iterator.rows
        pairs = loop_pairs(rows, s.eos_id)
        assert pairs < seq * (seq + 1) / 2  # the rows hold several documents
        assert s.attention_pairs == pytest.approx(pairs, rel=1e-12)
        model, memory = validate(config, spec)
        oracle = predict_step(
            model, spec, num_csx=1, batch_per_system=config.train_input.batch_size,
            micro_batch=s.micro_batch, seq_len=seq, layout=StepLayout(memory),
            sparsity=Sparsity(attention_pairs_per_row=pairs),
        )  # fmt: skip
        assert s.prediction.predicted_s == pytest.approx(oracle.predicted_s, rel=1e-12)
        full = predict(config, spec, model, memory)  # what --validate-only prices
        assert full.predicted_s > s.prediction.predicted_s
        line = run_lines(s, trains=True, evals=False)[0][0]
        assert f"{pairs:,.0f} (query, key) pairs a row as measured on the run's rows" in line
    finally:
        release(s.dir)


def test_llama3_8b_packed_step_prices_1024_token_documents():
    """The varlen-packing experiment's case: llama3-8b rows of 8,192 tokens holding 1,024-token
    documents, priced against predict_step with those pairs; before the data is read the
    validate line prices full causal rows and says so."""
    from wse_systems.training.performance import Sparsity, StepLayout, predict_step

    config = load_config("llama3_8b", ["train_input.packing=true"])
    spec = preset(config.runconfig.wafer)
    model, plan = validate(config, spec)
    seq = config.train_input.max_sequence_length
    pairs = (seq // 1024) * 1024 * 1025 / 2
    packed = predict(config, spec, model, plan, pairs)
    run = config.runconfig
    oracle = predict_step(
        model, spec, num_csx=run.num_csx,
        batch_per_system=config.train_input.batch_size // run.num_csx,
        micro_batch=packed.extra["micro_batch"], seq_len=seq,
        layout=StepLayout(plan, clip_gradients=config.optimizer.max_gradient_norm is not None),
        sparsity=Sparsity(attention_pairs_per_row=pairs),
    )  # fmt: skip
    assert packed.predicted_s == pytest.approx(oracle.predicted_s, rel=1e-12)
    assert packed.predicted_s < predict(config, spec, model, plan).predicted_s
    said = saves_note(config)
    assert f"full causal rows of {seq:,} tokens ({seq * (seq + 1) // 2:,} (query, key)" in said
    assert "train_input.packing" not in saves_note(load_config("llama3_8b"))


# 1, 2: the read ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("runconfig.max_checkpoints=-1", "runconfig.max_checkpoints must be >= 0 (checkpoints "
         "kept; 0 or null: every one), got -1"),
        ("runconfig.keep_checkpoint_max=-2", "runconfig.keep_checkpoint_max must be >= 0"),
        ("runconfig.checkpoint_steps=-1", "runconfig.checkpoint_steps must be >= 0 (0: no "
         "periodic checkpoint, the last step's alone), got -1"),
        ("runconfig.log_steps=-1", "runconfig.log_steps must be >= 0 (0: the last step's line "
         "alone), got -1"),
    ],
)  # fmt: skip
def test_negative_cadences_are_refused_naming_what_0_means(override, message):
    from wse_trainer.config_check import check_config

    with pytest.raises(ConfigError) as e:
        check_config(load_config("tiny", [override]))
    assert str(e.value).startswith(message)


def test_max_checkpoints_is_keep_checkpoint_max_and_0_keeps_all():
    assert load_config("tiny", ["runconfig.max_checkpoints=2"]).runconfig.keep_checkpoint_max == 2
    assert load_config("tiny").runconfig.keep_checkpoint_max is None  # ModelZoo's default
    from wse_trainer.cadence import loop_config

    zero = load_config("tiny", ["runconfig.max_checkpoints=0", "runconfig.checkpoint_steps=0",
                                "runconfig.log_steps=0"])  # fmt: skip
    loop = loop_config(zero).runconfig
    assert loop.keep_checkpoint_max is None  # orbax's max_to_keep None: every one
    every = [s for s in range(1, zero.runconfig.max_steps + 1) if not s % loop.checkpoint_steps]
    assert every == [] and not [s for s in range(1, loop.max_steps + 1) if not s % loop.log_steps]


def test_a_resumed_folders_steps_count_toward_the_kept_newest(tmp_path):
    """orbax's max_to_keep counts the folder's steps, an earlier invocation's too: the note
    names the oldest of all of them (oracle: the newest k of every step on disk and saved)."""
    model_dir = tmp_path / "m"
    for step in (2, 4):
        (model_dir / "checkpoints" / str(step)).mkdir(parents=True)
    config = load_config("tiny", [f"runconfig.model_dir={model_dir}", "runconfig.max_steps=8",
                                  "runconfig.checkpoint_steps=2",
                                  "runconfig.keep_checkpoint_max=2"])  # fmt: skip
    every = sorted({2, 4, *range(6, 9, 2)})
    gone = every[:-2]
    note = keep_note(config, model_dir)
    assert gone == [2, 4]
    assert f"deletes {len(gone)} of its folder's {len(every)} checkpoints" in note
    assert "oldest first: steps 2, 4;" in note
    assert keep_note(load_config("tiny", [f"runconfig.model_dir={model_dir}"]), model_dir) is None
