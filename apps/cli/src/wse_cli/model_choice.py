"""`wse plan --model`: which model to plan for, read from a preset, a shipped trainer config,
a params.yaml, an HF directory or its config.json.

Contract. `resolve_model(text)` returns a `ModelChoice` (the `wse_models.ModelConfig` and, from
a params file, its per-system batch, sequence, systems, memory plan and wafer) or raises
`PlanError` naming the choices; `plan_wafer(choice, wafer, spec_file)` the wafer a plan of it
prices; `wafer_dtype` the weights' dtype `plan infer` prices it in; `micro_batch_setting`
`plan train --micro-batch`'s value; `draft_asked` `plan infer`'s draft and its acceptance,
given as a rate or as a measured round. `PlanError` is the error of every `wse plan` input
(`wse_systems.planning.train` raises it too).
"""

from __future__ import annotations

from pathlib import Path

from wse_core import WseError, suggest
from wse_core.host.readers import load_json, read_text
from wse_systems.planning.choice import ModelChoice, PlanError

from wse_cli.wafer_choice import names_spec_file

__all__ = ["PlanError", "ModelChoice", "plan_wafer", "resolve_model", "wafer_dtype",
           "micro_batch_setting", "draft_asked"]  # fmt: skip


def _from_params(path: str, name: str) -> ModelChoice:
    from wse_systems.training.plan import slots_of
    from wse_trainer.config import load_config
    from wse_trainer.config_check import check_config
    from wse_trainer.run import model_config
    from wse_trainer.session import clips

    cfg = load_config(path)
    model = model_config(cfg)
    # hunt 62: num_csx 0 was a ZeroDivisionError here, batch_size 0 or -16 a traceback in the
    # micro-batch planner, max_seq_len below max_sequence_length planned: wse train's checks
    check_config(cfg, model.max_seq_len, model.vocab_size)
    run = cfg.runconfig
    n = run.num_csx
    # hunt 71: the memory plan (stride, chunks) and the wafer were dropped: a plan 6.3x off
    # `wse train --validate-only` of the same file
    return ModelChoice(
        name, model, cfg.train_input.batch_size // n,
        cfg.train_input.max_sequence_length, n, cfg.train_input.micro_batch_size,
        cfg.train_input.batch_size, run.activation_stride, run.weight_chunks, str(run.wafer),
        slots_of(cfg.optimizer), clips(cfg),
    )  # fmt: skip


def plan_wafer(
    choice: ModelChoice, wafer: str | None, spec_file: Path | None
) -> tuple[str | None, Path | None]:
    """(preset, spec file) a plan prices (`wafer_choice.wafer_spec`'s first two arguments):
    `--wafer` / `--spec` where given; else a params file's `runconfig.wafer`, as `wse train`
    runs it, where it is a spec file or the preset of a CS system; else (None, None), the
    command's default (a test wafer such as `small` is part of no system a plan can price).
    `plan_train` says on its assumptions which wafer it priced and the file's."""
    if wafer is not None or spec_file is not None or choice.wafer is None:
        return wafer, spec_file
    if names_spec_file(choice.wafer):
        return None, Path(choice.wafer)
    from wse_core import preset

    try:
        return (choice.wafer, None) if preset(choice.wafer).system_peak_w else (None, None)
    except WseError:  # no such preset: wse train refuses it; plan on the default, said
        return None, None


def _hf_file(path: Path) -> Path:
    return path / "config.json" if path.is_dir() else path


def _read_hf(path: Path) -> dict:
    """An HF config.json's JSON, within the file limits (size, depth) and with no JAX."""
    file = _hf_file(path)
    try:
        return load_json(read_text(file, "HF config"), str(file))
    except (OSError, ValueError) as e:
        raise PlanError(f"cannot read HF config {str(file)!r}: {e}") from None


def _from_hf(path: Path, data: dict | None = None) -> ModelChoice:
    import wse_models

    data = _read_hf(path) if data is None else data
    return ModelChoice(str(path), wse_models.config_from_hf(data, dtype="bfloat16"))


def resolve_model(text: str) -> ModelChoice:
    """A preset ("llama3-70b"), shipped config ("llama3_8b"), params.yaml or HF directory."""
    if not text.strip():  # hunt 61: '' was read as '.', then "cannot read HF config"
        raise PlanError(
            f"--model is empty ({text!r}); give a preset (e.g. llama3-8b), a params.yaml or an "
            "HF directory with config.json"
        )
    path = Path(text)
    hf = None
    if (path.is_dir() or path.suffix == ".json") and _hf_file(path).is_file():
        hf = _read_hf(path)  # a hostile file is refused before wse_models brings in JAX
    import wse_models
    from wse_trainer.config import SHIPPED

    if text in wse_models.PRESETS:
        return ModelChoice(text, wse_models.preset_config(text, dtype="bfloat16"))
    if text in SHIPPED and not path.exists():
        return _from_params(text, text)
    if path.is_dir() or path.suffix == ".json":
        return _from_hf(path, hf)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return _from_params(text, path.stem)
    names = [*wse_models.PRESETS, *SHIPPED]
    raise PlanError(
        f"unknown model {text!r}{suggest(text, names)}; use a preset ({', '.join(names)}), "
        "a params.yaml or an HF directory with config.json"
    )


def wafer_dtype(asked: str, model: str, choice: ModelChoice) -> str:
    """--wafer-dtype; auto: an HF folder's own dtype (its config's, `param_dtype`: the engine
    serves a float32 folder in float32; hunt 68: priced 16-bit, 4.5% from `wse infer
    generate`), else bfloat16 (a preset, a params file: 16-bit, as the seeds state)."""
    import wse_models

    if asked != "auto":
        return asked
    path = Path(model)  # `resolve_model`'s HF folder test, after its presets
    folder = model not in wse_models.PRESETS and (path.is_dir() or path.suffix == ".json")
    return choice.config.param_dtype if folder else "bfloat16"


def _draft_model(text: str) -> ModelChoice:
    """`resolve_model` of `--draft`, its refusal naming the draft (session 86: a draft folder
    whose config.json dtype no engine runs, int8, was refused as "config.json's torch_dtype
    'int8' ...", which of the two folders unsaid), with the dtypes a draft folder may hold."""
    from wse_models.errors import CheckpointError

    try:
        return resolve_model(text)
    except CheckpointError as e:
        raise PlanError(f"--draft {text} (the draft folder): {e}; no option reads a draft "
                        "folder as another dtype") from None  # fmt: skip
    except WseError as e:
        raise PlanError(f"--draft {text}: {e}") from None


def micro_batch_setting(text: str | None) -> int | str | None:
    """--micro-batch: a mode of `wse_systems.training.micro_batch.MODES` or a positive int
    (None: the params file's, else "auto", as `wse train` runs it)."""
    from wse_systems.training.micro_batch import MODES

    if text is None or text in MODES:
        return text
    if text.isascii() and text.isdigit() and int(text) > 0:  # hunt 61: "٢" was read as 2
        return int(text)
    from wse_core.errors import shown

    raise PlanError(
        f"--micro-batch must be {', '.join(MODES)} or a positive integer, got {shown(text)}"
    )


def draft_asked(
    draft: str | None, gamma: int | None, alpha: float | None, per_round: float | None
) -> tuple[object, list[str]]:
    """(`wse_systems.planning.infer.Draft`, the notes that say how its round is priced) of
    `plan infer --draft --gamma --alpha --tokens-per-round`. `--alpha` is priced through
    Leviathan's i.i.d. round, (1 - a^(g+1)) / (1 - a) tokens; `--tokens-per-round` (the
    engine's measured `tokens_per_round`, `wse infer generate --json`) as the rate that
    round turns into it (`alpha_for_round`: `Speculation` takes only a rate), said in a
    note. Hunt 72: spec_alpha 0.6207 priced 2.393 tokens a round, the engine kept 2.214
    (acceptance by draft position is not i.i.d.), the plan 8.1% faster than its report."""
    from wse_systems.planning.choice import alpha_for_round
    from wse_systems.planning.infer import Draft
    from wse_systems.planning.infer_inputs import DEFAULT_GAMMA

    model = None if draft is None else _draft_model(draft)
    if per_round is None:
        return Draft(model, gamma, alpha), []
    if draft is None:
        raise PlanError("--tokens-per-round needs --draft (the draft model whose round it is)")
    if alpha is not None:
        raise PlanError("give --alpha or --tokens-per-round, not both: each sets the round")
    g = DEFAULT_GAMMA if gamma is None else gamma
    a = alpha_for_round(per_round, g)
    note = (f"speculative round: --tokens-per-round {per_round:g} (measured; the engine's "
            f"tokens_per_round), priced as the acceptance rate {a:.6g} at which Leviathan's "
            f"i.i.d. formula (1 - a^(g+1)) / (1 - a) at gamma {g} gives it; that rate is not "
            "a measured acceptance")  # fmt: skip
    return Draft(model, gamma, a), [note]
