"""ModelZoo's run.py flags that `wse train` reads (hunt 81: each was "No such option", and
`--eval_steps` pointed at --max-steps, a train step count), as Cerebras ModelZoo's cli_parser
(`add_general_arguments`) defines them:

- `-p/--params` and `-m/--mode` are declared on `wse train` itself, beside their long names;
- `--eval_steps N` is ModelZoo's runconfig.eval_steps, `eval_input.eval_steps` here
  (`with_eval_steps`; given beside an override of it with another value, refused);
- `--load_checkpoint_states` is `runconfig.load_checkpoint_states`, and
  `--is_pretrained_checkpoint` its older spelling of `model` (`states_flag`): the checkpoint's
  weights alone, from step 0, a fresh optimizer of any type; like ModelZoo's run.py, it needs
  a checkpoint_path (`check_pretrained`);
- `--compile_only`, `-c/--compile_dir` and a `--logging` level other than INFO (ModelZoo's
  default, what runs) have no counterpart and are refused in one line naming what runs
  instead (`refuse_unrun`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_cli.errors import fail

__all__ = ["check_pretrained", "refuse_unrun", "states_flag", "with_eval_steps"]


def refuse_unrun(compile_only: bool, compile_dir: str | None, log_level: str | None) -> None:
    """Refuse ModelZoo's run.py flags that have no counterpart here, naming what runs
    instead (hunt 81: "No such option" with no hint); `--logging INFO` is what runs."""
    if compile_only:
        fail(
            "--compile_only (ModelZoo's: compile for the wafer, run nothing) has no counterpart: "
            "a run here compiles as it starts; --validate-only checks the config and prints the "
            "memory plan and the predicted step without running"
        )
    if compile_dir is not None:
        fail(
            "--compile_dir (ModelZoo's compile artifacts folder) has no counterpart: the "
            "compiled steps go to JAX's compile cache (WSE_CACHE_DIR sets its folder)"
        )
    if log_level is not None and log_level.strip().upper() not in ("INFO", "20"):
        fail(
            f"--logging {log_level!r:.40}: a run here logs at one level, ModelZoo's INFO (its "
            "lines in <model_dir>/run.log and on the terminal, each step's metrics in "
            "metrics.jsonl); leave --logging out, or give INFO"
        )


def states_flag(states: str | None, pretrained: bool) -> str | None:
    """`runconfig.load_checkpoint_states` as the flags give it: --is_pretrained_checkpoint is
    ModelZoo's older spelling of `model`; both, naming other states, is refused."""
    if not pretrained:
        return states
    if states is not None and states.strip() != "model":
        fail(
            f"--is_pretrained_checkpoint loads the model alone and --load_checkpoint_states "
            f"{states!r:.60} says otherwise; give one of them"
        )
    return "model"


def with_eval_steps(config, args: list[str], eval_steps: int | None):
    """`config` with `--eval_steps` (ModelZoo's run.py flag for runconfig.eval_steps, which
    is `eval_input.eval_steps` here) in its eval_input; refused beside an override of it
    with another value, as a flag and its override are (`_set_twice`)."""
    from wse_trainer.config import config_from_dict

    if eval_steps is None:
        return config
    for key in ("eval_input.eval_steps", "runconfig.eval_steps"):
        said = [a.partition("=")[2] for a in args if a.partition("=")[0] == key]
        if said and said[-1] != str(eval_steps):
            fail(
                f"{key} is given twice ({said[-1]!r}, then --eval-steps {eval_steps}); give it once"
            )
    data = config.to_dict()
    data["eval_input"]["eval_steps"] = eval_steps
    return dataclasses.replace(config_from_dict(data), notes=config.notes)


def check_pretrained(config: Any, pretrained: bool) -> None:
    """Refuse --is_pretrained_checkpoint with no checkpoint_path, as ModelZoo's run.py does."""
    if pretrained and not config.runconfig.checkpoint_path:
        fail(
            "--is_pretrained_checkpoint loads a checkpoint's weights alone (from step 0, a fresh "
            "optimizer state): give the checkpoint with --checkpoint-path"
        )
