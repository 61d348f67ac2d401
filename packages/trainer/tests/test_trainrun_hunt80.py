"""Hunt 80's training-loop holes (1, 6, 8-11, 13, 14), each checked against an oracle:

1. a run started in a new model_dir from `--checkpoint-path` rebuilt the decay from its own
   max_steps (step 4 at 0.002325, not 0.0026046), unsaid: it keeps the checkpoint's decay
   now, as a resume in its own folder does; a decay_steps it is given runs, the first step
   whose rate moves said with both rates. Oracle: the uninterrupted run's rates and losses,
   and ModelZoo's warm-up + cosine formula by hand.
6. eval recorded loss and perplexity only: eval/accuracy (ModelZoo's next-token top-1
   accuracy) is in metrics.jsonl, TensorBoard and the eval line. Oracle: NumPy's argmax
   and log-softmax over the model's logits of the eval rows.
8. the config's notes were said by the CLI alone, on stderr: the run logs them (run.log,
   echo) and returns them (`RunResult.notes`). Oracle: `config_notes` of the config.
9. the note of a resume that keeps its decay past max_steps hid that the steps past it
   train at lr 0: it says which steps and how to decay longer. Oracle: the hand formula.
10. `--mode eval` of a step evaluated before appended a second record (two TensorBoard
    points at one step) and said "resumed from checkpoint step N": its record replaces the
    old one, and it says "evaluating checkpoint step N". Oracle: the files read raw.
11. a resume over another corpus reused the data position in a new order, unsaid: the rows'
    sha256 is saved with the position and another is said. Oracle: the count by hand.
13. `MemoryX.params_tree()` taken before a step was deleted by it (donation): it is a copy.
    Oracle: a NumPy copy taken before the step.
14. an eval file holding the train file's documents in another format was evaluated unsaid
    (the overlap was counted only once both named one file). Oracle: the count by hand.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import wse_models
from wse_core import preset
from wse_trainer.config_check import config_notes
from wse_trainer.data import BatchIterator, corpus_texts, read_tokenizer
from wse_trainer.metrics import read_metrics
from wse_trainer.overlap import overlap_note
from wse_trainer.run_lock import release
from wse_trainer.session import Session, evaluate
from wse_trainer.splits import held_out
from wse_trainer.testing import (
    run_on_preset,
    stream_model,
    tensorboard_scalars,
    tiny_config,
)


def _hand_rate(opt, decay: int, step: int) -> float:
    """ModelZoo's LinearLR warm-up from 0, then CosineDecayLR to min_learning_rate over
    `decay - warmup_steps` steps, held there after: the rate of 1-based `step` (the count
    of updates before it is step - 1)."""
    count, warm = step - 1, opt.warmup_steps
    if count < warm:
        return opt.learning_rate * count / warm
    t = min(count - warm, decay - warm) / (decay - warm)
    peak, floor = opt.learning_rate, opt.min_learning_rate
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * t))


def _train(model_dir: Path) -> dict[int, dict]:
    return {m["step"]: m for m in read_metrics(model_dir) if m["mode"] == "train"}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The tiny run (6 steps, warm-up 2, cosine to 0, saved at 3 and 6), finished."""
    where = tmp_path_factory.mktemp("base")
    run_on_preset(tiny_config(where))
    return where


# 1 and 8 ------------------------------------------------------------------------------------


def test_a_start_from_a_checkpoint_keeps_its_decay_and_the_run_says_its_notes(tmp_path, base):
    step3 = base / "model_dir" / "checkpoints" / "3"
    config = tiny_config(tmp_path, "runconfig.max_steps=5", f"runconfig.checkpoint_path={step3}",
                         "runconfig.eval_frequency=2")  # fmt: skip
    lines: list[str] = []
    result = run_on_preset(config, echo=lines.append)
    uninterrupted, started = _train(base / "model_dir"), _train(tmp_path / "model_dir")
    opt = config.optimizer
    for step in (4, 5):  # the rates and losses of the uninterrupted run, decay over 6
        assert started[step]["lr"] == uninterrupted[step]["lr"]
        assert started[step]["lr"] == pytest.approx(_hand_rate(opt, 6, step), rel=1e-6)
        assert started[step]["loss"] == uninterrupted[step]["loss"]
    assert _hand_rate(opt, 5, 4) != pytest.approx(_hand_rate(opt, 6, 4), rel=1e-3)  # told apart
    kept = (
        "note: the run keeps the cosine decay over 6 steps its checkpoint was trained on "
        "(optimizer.decay_steps=6); runconfig.max_steps=5 only says where it stops; give "
        "optimizer.decay_steps=5 to decay over this run's steps"
    )
    # 8: the config's notes (the one list the CLI's --validate-only says too), then the run's
    said = config_notes(config)
    assert said and any("runconfig.eval_frequency=2 has no effect" in n for n in said)
    assert result.notes == [*said, kept]
    log = (tmp_path / "model_dir" / "run.log").read_text()
    for note in result.notes:
        assert note in lines and f"INFO: {note}\n" in log


def test_a_decay_given_to_a_start_from_a_checkpoint_runs_and_is_said(tmp_path, base):
    step3 = base / "model_dir" / "checkpoints" / "3"
    config = tiny_config(tmp_path, "runconfig.max_steps=5", "optimizer.decay_steps=5",
                         f"runconfig.checkpoint_path={step3}")  # fmt: skip
    result = run_on_preset(config)
    rates, opt = _train(tmp_path / "model_dir"), config.optimizer
    for step in (4, 5):  # ModelZoo's rule: the optimizer's step count restored, this schedule
        assert rates[step]["lr"] == pytest.approx(_hand_rate(opt, 5, step), rel=1e-6)
    new, old = rates[4]["lr"], _train(base / "model_dir")[4]["lr"]
    assert (
        f"note: --checkpoint-path: checkpoint step 3 ({step3.resolve()}) was trained on another "
        f"learning-rate schedule (a decay over 6 steps there, 5 here): step 4 trains at lr "
        f"{new:.5g}, not {old:.5g}; the checkpoint's optimizer state (its step count) is "
        "restored, the schedule is this run's; give optimizer.decay_steps=6 to keep its decay"
    ) in result.notes


# 9 ------------------------------------------------------------------------------------------


def test_a_resume_past_its_decay_says_the_steps_at_the_floor(tmp_path, base):
    where = _copy(base, tmp_path / "k")
    config = tiny_config(where, "runconfig.max_steps=8")
    result = run_on_preset(config)
    rates = _train(where / "model_dir")
    for step in (7, 8):  # past the decay over 6: the floor, min_learning_rate 0
        assert rates[step]["lr"] == _hand_rate(config.optimizer, 6, step) == 0.0
    step6 = where / "model_dir" / "checkpoints" / "6"
    assert result.notes == [
        "note: the run keeps the cosine decay over 6 steps it was trained on "
        "(optimizer.decay_steps=6); runconfig.max_steps=8 only says where it stops; steps 7-8 "
        "train at optimizer.min_learning_rate=0.0 (lr 0: no update); for a decay over 8 steps "
        f"start a new model_dir (-o) from --checkpoint-path {step6} with "
        "optimizer.decay_steps=8"
    ]  # the same data: no note of another corpus (hole 11)


# 6 and 10 -----------------------------------------------------------------------------------


def test_eval_of_an_evaluated_step_replaces_its_record_with_its_accuracy(tmp_path, base):
    where = _copy(base, tmp_path / "e")
    config = tiny_config(where, "runconfig.mode=eval")
    first = run_on_preset(config)
    lines: list[str] = []
    again = run_on_preset(config, echo=lines.append)
    records = [m for m in read_metrics(where / "model_dir") if m["mode"] == "eval"]
    assert len(records) == 1 and records[0]["step"] == 6  # before: two records of step 6
    rec = records[0]
    assert (rec["loss"], rec["accuracy"]) == (again.eval_loss, again.eval_accuracy)
    assert (again.eval_loss, again.eval_accuracy) == (first.eval_loss, first.eval_accuracy)
    assert rec["perplexity"] == pytest.approx(math.exp(rec["loss"]), rel=1e-12)
    shown = tensorboard_scalars(where / "model_dir" / "eval")
    assert shown["accuracy"] == [(6, float(np.float32(rec["accuracy"])))]  # one point
    assert shown["loss"] == [(6, float(np.float32(rec["loss"])))]
    assert (
        f"evaluating checkpoint step 6; its eval on record in metrics.jsonl (loss "
        f"{first.eval_loss:.5f}) is replaced"
    ) in lines
    assert not [x for x in lines if x.startswith("resumed from")]
    assert (
        f"| Eval Device=CSX, GlobalStep=6, Loss={rec['loss']:.5f}, Perplexity="
        f"{math.exp(rec['loss']):.3f}, Accuracy={rec['accuracy']:.5f}"
    ) in lines


def test_eval_accuracy_is_numpys_argmax_over_the_eval_targets(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train_and_eval", "runconfig.max_steps=3")
    s = Session(config, preset("small"), None)
    try:
        for _ in range(3):  # a model past its random start: some targets right, not all
            s.trainer.step(next(s.iterator), None)
        got = evaluate(s)
        params = s.trainer.memx.params_tree()
        bsz, n = config.eval_input.batch_size, config.eval_input.eval_steps
        rows = np.asarray(s.eval_rows[: n * bsz])
        logits = np.asarray(wse_models.forward(s.model, params, rows[:, :-1])[0], np.float64)
    finally:
        release(s.dir)
    targets = rows[:, 1:]
    top = np.sort(logits, axis=-1)
    near = int((top[..., -1] - top[..., -2] < 1e-4).sum())  # float32 ties argmax may break
    hits = int((logits.argmax(-1) == targets).sum())
    assert abs(got.accuracy * targets.size - hits) <= near
    assert 0 < hits < targets.size
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    top1 = logits.max(-1, keepdims=True)
    loss = np.mean(np.log(np.exp(logits - top1).sum(-1)) + top1[..., 0] - picked)
    assert got.loss == pytest.approx(loss, rel=1e-5)  # fp32 sums against float64


# 11 -----------------------------------------------------------------------------------------


def test_a_restore_over_other_rows_is_said():
    rows = np.arange(5 * 9, dtype=np.int32).reshape(5, 9)
    first = BatchIterator(rows, 2, seed=1)
    next(first)
    state = first.state()
    assert BatchIterator(rows.copy(), 2, seed=1).restore(state) is None  # the same rows
    legacy = {k: state[k] for k in ("seed", "epoch", "index")}  # saved before hunt 80
    assert BatchIterator(rows[:4], 2, seed=1).restore(legacy) is None
    grown = BatchIterator(np.concatenate([rows, rows[:2]]), 2, seed=1)
    said = grown.restore(state)
    assert said is not None and said.startswith(
        "note: the training data is not the data the checkpoint was trained on (5 rows there, "
        "7 here: "
    )
    assert (grown.epoch, grown.index) == (0, 1)  # the position kept, as said
    other = rows.copy()
    other[0, 0] += 1
    assert "(5 rows of other tokens there, 5 here" in BatchIterator(other, 2, 1).restore(state)


def test_a_resume_over_a_grown_corpus_says_so(tmp_path, base):
    where = _copy(base, tmp_path / "g")
    config = tiny_config(where, "runconfig.max_steps=7")
    corpus = Path(config.train_input.data_dir)
    docs = corpus.read_text().splitlines()
    corpus.write_text("\n".join(docs + docs[:20]) + "\n")  # 20 more documents
    result = run_on_preset(config)
    tok = read_tokenizer(where / "model_dir" / "tokenizer.json")
    seq = config.train_input.max_sequence_length

    def rows(texts: list[str]) -> int:  # by hand: documents joined by EOS, rows of seq + 1
        return (sum(len(e.ids) + 1 for e in tok.encode_batch(texts)) - 1) // seq

    kept = [d for d, m in zip(docs, held_out([len(d.encode()) for d in map(_text, docs)]),
                              strict=True) if not m]  # fmt: skip
    now = corpus_texts(config.train_input)
    then = rows([_text(d) for d in kept])
    assert then != rows(now)
    per, taken = then // config.train_input.batch_size, 6  # batches an epoch; steps trained
    epoch, index = (taken // per - 1, per) if taken % per == 0 else divmod(taken, per)
    said = [n for n in result.notes if n.startswith("note: the training data is not")]
    assert said == [
        f"note: the training data is not the data the checkpoint was trained on ({then:,} "
        f"rows there, {rows(now):,} here: train_input.data_dir, max_corpus_bytes or the files "
        f"changed); its position (epoch {epoch}, row {index * config.train_input.batch_size}) "
        "is kept over the new rows' "
        "shuffled order, "
        "so rows it trained on may come again and others be skipped before the epoch ends; "
        "resume over the same data to continue its order"
    ]


def _text(line: str) -> str:
    return json.loads(line)["text"]


# 13 -----------------------------------------------------------------------------------------


def test_a_params_tree_taken_before_a_step_outlives_it():
    from wse_core import preset as wafer
    from wse_systems.training.plan import plan_activations
    from wse_trainer.optimizer import base_transform
    from wse_trainer.stream import StreamedTrainer
    from wse_trainer.testing import ADAMW, B, S, stream_batches

    model = stream_model(n_layers=1)  # one layer: its stack is one array too
    tr = StreamedTrainer(
        model, wse_models.init_params(model, jax.random.key(1)), base_transform(ADAMW, 10),
        num_csx=1, global_batch=B, seq_len=S,
        plan=plan_activations(model, wafer("small"), B, S, 1, 0),
    )  # fmt: skip
    before = tr.memx.params_tree()
    held = jax.tree.map(lambda a: np.array(a, copy=True), before)
    tr.step(stream_batches(model)[0], None)
    after = tr.memx.params_tree()
    for kept, was in zip(jax.tree.leaves(before), jax.tree.leaves(held), strict=True):
        np.testing.assert_array_equal(np.asarray(kept), was)  # before: deleted or donated
    moved = [not np.array_equal(np.asarray(a), b) for a, b in
             zip(jax.tree.leaves(after), jax.tree.leaves(held), strict=True)]  # fmt: skip
    assert all(moved)  # the step updated every leaf: the tree taken before is not the masters


# 14 -----------------------------------------------------------------------------------------


def test_eval_documents_in_another_file_format_are_counted(tmp_path):
    docs = [f"document {i}: the wafer streams layer {i % 7} of weights" for i in range(30)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    (tmp_path / "c.txt").write_text("".join(d + "\n" for d in docs[5:] + ["held out text"]))
    data = tiny_config(tmp_path, f"train_input.data_dir={tmp_path / 'c.jsonl'}",
                       f"eval_input.data_dir={tmp_path / 'c.txt'}")  # fmt: skip
    note = overlap_note(data.train_input, data.eval_input)
    assert note is not None and note.startswith(  # by hand: 25 of the txt's 26 lines
        "note: 25 of the 26 eval documents of eval_input.data_dir "
    )
