"""`<model_dir>/hf/`: the trained model for inference, written whole or not at all.

Contract. `export_hf(s, step)` writes the model in HF format (`wse_models.save_pretrained`),
`tokenizer.json`, `tokenizer_config.json` and `generation_config.json` naming the EOS token
that separates the training documents (generation stops there, as transformers and vLLM
stop), and `EXPORT_RECORD` (`{"step": N}`: the step the weights are of; transformers reads
no such file and leaves it alone). It fills a new folder beside `hf/` that takes its place in
one step once complete (`wse_core.host.atomic.atomic_folder`), so a full disk, a file-size
limit, Ctrl-C or SIGTERM while it writes leaves the previous export whole (hunt 68: under
`ulimit -f` config.json was rewritten without its bos/eos ids, then the weights failed with
a 72-line SafetensorError traceback). The disk's refusal is `ExportError` (a RunFault: one
line, exit 1) saying that the old export and the checkpoints are kept and how to export
again. Files someone added to `hf/` (a README) are carried into the new export; an older
export's weight files are not (another sharding would mix two models in one folder).

The export is written at the clean end of a run only. A stopped run leaves `hf/` at the step
of its last clean end: `export_lag(model_dir, step)` is what the Ctrl-C line adds then, and
`wse infer` says the same when given the run folder (`wse_inference.run_export`; both read
the record with `wse_core.host.run_files.exported_step`). Rerunning the run's command with
`runconfig.max_steps` at the newest checkpoint's step trains nothing and exports that step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wse_core.errors import RunFault
from wse_core.host.run_files import EXPORT_RECORD, exported_step  # read by inference too
from wse_core.host.tensor_files import INDEX_FILE

__all__ = ["EXPORT_RECORD", "ExportError", "export_hf", "export_lag", "exported_step", "refresh"]


class ExportError(RunFault):
    """The disk refused the HF export (exit 1); the previous `hf/` and the checkpoints stay."""


def refresh(step: int) -> str:
    """How to export checkpoint `step` of a run, in words for a message."""
    return f"rerun the command with runconfig.max_steps={step}"


def export_hf(s: Any, step: int) -> Path:
    """`<model_dir>/hf/` of the session `s` (a `wse_trainer.session.Session`) at global
    `step`, replaced whole (module doc); ExportError when the disk refuses it."""
    from wse_core.host.atomic import atomic_folder
    from wse_core.host.memory import format_bytes

    from wse_trainer.save_faults import free_bytes, os_error

    out = s.dir / "hf"
    needed = s.trainer.memx.master_bytes  # the fp32 masters: what the export writes

    def fault(why: str) -> ExportError:
        return ExportError(
            f"the HF export of step {step} could not be written to {out}: {why} "
            f"({format_bytes(free_bytes(s.dir))} free on that disk, the export needs about "
            f"{format_bytes(needed)}); {out} is left as it was and the checkpoints are kept: "
            f"free space and {refresh(step)} to export step {step}"
        )

    if needed > free_bytes(s.dir):
        raise fault("not enough free space")
    try:
        with atomic_folder(out, keep=_kept) as stage:
            _write(s, stage, step)
    except Exception as e:
        err = os_error(e)  # safetensors' and tokenizers' carry the errno in their text
        if err is None:
            raise
        raise fault(err.strerror or str(err)) from None
    return out


def _kept(name: str) -> bool:
    """An entry of the old export carried into the new one: anything but its weights."""
    return not (name.endswith(".safetensors") or name == INDEX_FILE)


def _write(s: Any, folder: Path, step: int) -> None:
    """The export's files in `folder`. config.json names the EOS token as bos_token_id and
    eos_token_id (GPT-2's convention: one document separator); without them transformers
    takes GPT-2's 50256, outside this vocabulary."""
    import wse_models

    from wse_trainer.data import EOS

    model = wse_models.Transformer(s.model, params=s.trainer.memx.params_tree())
    wse_models.save_pretrained(model, folder)
    eos = s.tok.token_to_id(EOS)
    config = json.loads((folder / "config.json").read_text())
    config.update(bos_token_id=eos, eos_token_id=eos)
    _json(folder / "config.json", config)
    s.tok.save(str(folder / "tokenizer.json"))
    _json(folder / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast",
                                             "eos_token": EOS})  # fmt: skip
    _json(folder / "generation_config.json", {"eos_token_id": eos})
    _json(folder / EXPORT_RECORD, {"step": step})


def _json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def export_lag(model_dir: Path, step: int) -> str:
    """The words a stopped run's line adds when `model_dir/hf` holds an older step than its
    newest checkpoint `step` ("; run/hf still holds step 4 (...)"), else ""."""
    held = exported_step(model_dir / "hf")
    if held is None or held >= step:
        return ""
    hf = model_dir / "hf"
    return (
        f"; {hf} still holds step {held} (the command with runconfig.max_steps={step} exports it)"
    )
