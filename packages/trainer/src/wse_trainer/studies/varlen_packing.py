"""Experiment `varlen-packing`: what padding costs on a corpus with a real length spread, and
what packing documents (segment ids, positions restarting per document) saves.

Corpus: the Python standard library's source files (`data.stdlib_files`, tests left out, up
to 3 MB), one file a document, tokenized with a byte-level BPE of 8192 tokens trained on
them; file lengths spread over three orders of magnitude (a few tokens to tens of
thousands). For each sequence length S:

- padded: each document starts a row of S tokens and is cut into rows when longer; its last
  row is padded (`data.pad_documents`). The padding fraction is counted on those rows.
- packed: documents joined with EOS and cut into rows of S (`data.pack`), each row's
  documents separated by segment ids (`data.segments`): no padding, attention within each
  document segment only.

Predicted time: on the wafer, `wafer_epoch_s` prices the epoch's steps with the trainer's
own cost model (`wse_systems.training.performance.predict_step` on one WSE-3, WAFER_BATCH rows a
step, 16-bit compute with fp32 master weights): padded rows run their full causal attention over
S; packed rows run attention only within each document (the sum of n (n + 1) / 2 (query,
key) pairs over the row's document pieces), and there are fewer rows. On the GPU,
`gpu_train_s` is training flops (`ModelConfig.train_flops_per_token(n)`: 6 N plus causal
attention over n keys, per token processed) over one H100's dense bf16 peak (989 TFLOP/s,
`wse_systems.gpu.H100`) at `wse_systems.gpu.TRAIN_MFU` (its default assumption). GPUs
pack too (varlen attention kernels); the wafer's claim is only that it needs no padding at all.
Predictions are the same with `--quick` (nothing here is timed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from wse_core import ExperimentResult, PredictionRow
from wse_core.cost.assumptions import assumed_spec

__all__ = ["run", "gpu_train_s", "wafer_epoch_s", "padding_fraction", "SEQ_LENS"]

NAME = "varlen-packing"
SEQ_LENS = (1024, 2048, 8192)
MODEL = "llama3-8b"
VOCAB = 8192
CORPUS_BYTES = 3_000_000


WAFER_BATCH = 8  # rows per step on the wafer (an input of the prediction, not measured)


def gpu_train_s(config: Any, segment_lengths: Sequence[int], flops_per_s: float) -> float:
    """Seconds to train on segments of the given token lengths (a padded row is one segment
    of its full length; a packed row one per document piece): sum of n x
    `train_flops_per_token(n)` over the segments, at `flops_per_s`."""
    n = np.asarray(segment_lengths, np.int64)
    flops = sum(int(k) * config.train_flops_per_token(int(k)) for k in n)
    return flops / flops_per_s


def wafer_epoch_s(config: Any, rows: int, seq_len: int, pairs_per_row: float | None) -> float:
    """Seconds for `rows` rows of `seq_len` tokens on one WSE-3 at WAFER_BATCH rows a step,
    priced by the trainer's cost model (`pairs_per_row`: causal attention pairs of a row;
    None for a full causal row)."""
    from wse_systems.training.performance import Sparsity, predict_step

    step = predict_step(
        config,
        assumed_spec("wse3"),
        num_csx=1,
        batch_per_system=WAFER_BATCH,
        seq_len=seq_len,
        sparsity=Sparsity(attention_pairs_per_row=pairs_per_row),
    )
    return -(-rows // WAFER_BATCH) * step.predicted_s


def padding_fraction(real: np.ndarray) -> float:
    """Padding targets over all targets of padded rows (`real`: `pad_documents`' mask)."""
    targets = real[:, 1:]
    return float((~targets).sum()) / targets.size


def _segment_lengths(rows: np.ndarray, eos_id: int) -> np.ndarray:
    from wse_trainer.data import segments

    seg = segments(rows[:, :-1], eos_id).segment_ids
    ends = np.diff(seg, axis=1, append=seg[:, -1:] + 1) != 0  # last token of each segment
    idx = np.broadcast_to(np.arange(seg.shape[1]), seg.shape)
    out = []
    for r in range(seg.shape[0]):
        last = idx[r][ends[r]]
        out += np.diff(last, prepend=-1).tolist()
    return np.asarray(out)


def _corpus() -> tuple[list[list[int]], int]:
    from wse_trainer.data import EOS, stdlib_files, train_tokenizer

    texts = []
    for f in stdlib_files(CORPUS_BYTES):
        with open(f, encoding="utf-8", errors="replace") as fh:
            texts.append(fh.read())
    tok = train_tokenizer(texts, VOCAB)
    return [e.ids for e in tok.encode_batch(texts)], tok.token_to_id(EOS)


def _gpu_mfu() -> float:
    """The achieved share of peak in training: `wse_systems.gpu.TRAIN_MFU`, its default
    assumption (hunt 80: 0.39, the MFU Narayanan et al.'s 52% HFU implies; a copy of 0.4
    was kept here)."""
    from wse_systems.gpu import TRAIN_MFU

    return TRAIN_MFU


def _rates() -> dict[str, float]:
    from wse_systems.gpu import H100

    return {"h100": H100.peak_flops * _gpu_mfu()}


def run(*, quick: bool, seed: int) -> ExperimentResult:
    import wse_models

    from wse_trainer.data import pack, pad_documents

    docs, eos = _corpus()
    lens = np.asarray([len(d) + 1 for d in docs])
    config = wse_models.preset_config(MODEL)
    wafer_config = wse_models.preset_config(MODEL, dtype="bfloat16")
    rates = _rates()
    measurements, rows, bars = [], [], []
    for s in SEQ_LENS:
        padded, real = pad_documents(docs, s, eos)
        packed = pack(docs, s, eos)
        frac = padding_fraction(real)
        seg_lens = _segment_lengths(packed, eos)
        measurements.append({
            "seq_len": s, "documents": len(docs), "real_tokens": int(real[:, 1:].sum()),
            "padded_rows": len(padded), "padded_tokens": int(padded[:, 1:].size),
            "padding_fraction": frac, "packed_rows": len(packed),
            "packed_tokens": int(packed[:, 1:].size), "packed_segments": len(seg_lens),
        })  # fmt: skip
        pairs = float((seg_lens * (seg_lens + 1) / 2).sum()) / len(packed)
        times = {
            "wse3": (
                wafer_epoch_s(wafer_config, len(padded), s, None),
                wafer_epoch_s(wafer_config, len(packed), s, pairs),
            ),
            "h100": (
                gpu_train_s(config, [s] * len(padded), rates["h100"]),
                gpu_train_s(config, seg_lens, rates["h100"]),
            ),
        }
        for system in times:
            p = {"model": MODEL, "seq_len": s, "system": system}
            rows += [
                PredictionRow("padded_epoch_s", times[system][0], "s", p),
                PredictionRow("packed_epoch_s", times[system][1], "s", p),
                PredictionRow("packing_speedup", times[system][0] / times[system][1], "x", p),
            ]
        rows.append(PredictionRow("padding_fraction", frac, "", {"seq_len": s}))
        bars.append((s, frac, times))
    config_out = {
        "corpus": f"Python standard library source files (<= {CORPUS_BYTES} bytes, tests "
        "left out), one document per file",
        "tokenizer": f"byte-level BPE, {VOCAB} tokens, trained on the corpus",
        "doc_tokens": {q: float(np.percentile(lens, q)) for q in (10, 50, 90, 99)},
        "doc_tokens_max": int(lens.max()),
        "model": MODEL,
        "gpu_flops_per_s": rates["h100"],
        "wafer_batch": WAFER_BATCH,
        "assumptions": "wafer: the trainer's cost model (predict_step, one WSE-3, bf16 "
        f"compute, fp32 masters); H100 at {_gpu_mfu():g} MFU on train_flops_per_token(n) per "
        "token; "
        "attention causal within the row (padded) or within each document segment (packed)",
    }
    return ExperimentResult(NAME, seed, config_out, measurements, rows, _figure(bars, lens))


def _figure(bars, lens):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.hist(np.log10(lens), bins=40)
    a.set(xlabel="log10 document tokens", ylabel="documents", title="Corpus length spread")
    x = np.arange(len(bars))
    for k, system in enumerate(("wse3", "h100")):
        padded = [t[system][0] for _, _, t in bars]
        packed = [t[system][1] for _, _, t in bars]
        b.bar(x + 0.4 * k - 0.2, np.asarray(padded) / np.asarray(packed), 0.4, label=system)
    b.set_xticks(x, [f"S={s}\npad {f:.0%}" for s, f, _ in bars])
    b.set(ylabel="padded / packed time", title="Predicted gain from packing")
    b.legend(fontsize=8)
    fig.tight_layout()
    return fig
