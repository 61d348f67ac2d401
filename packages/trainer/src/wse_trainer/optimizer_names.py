"""The optimizer settings' names and rules that both the params file's reader
(`wse_trainer.config`) and its checks (`wse_trainer.config_check`) use: ModelZoo's spellings,
which settings each optimizer and each schedule reads, and the lines for a setting it does
not read (hunts 69, 70) and for ModelZoo's `learning_rate:` scheduler list (hunt 69). No
wse_trainer import: the reader imports it, so it cannot import the reader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OPTIMIZER_NAMES", "SCHEDULE_NAMES", "READ_BY", "SCHEDULE_READ_BY", "unused_settings",
           "scheduler_list", "IN_UNIT", "outside_unit"]  # fmt: skip

# ModelZoo's spellings, any case (hunt 69: `AdamW` was refused, "did you mean 'adam'?")
OPTIMIZER_NAMES = {n: n for n in ("adamw", "adam", "sgd", "momentum")}
SCHEDULE_NAMES = {n: n for n in ("constant", "cosine", "linear")} | {"constantlr": "constant",
    "cosinedecay": "cosine", "cosinedecaylr": "cosine", "linearlr": "linear"}  # fmt: skip
# The settings only some optimizers read (as ModelZoo's), and those that do (`refuse_unused`)
READ_BY = {**dict.fromkeys(("beta1", "beta2", "eps"), ("adamw", "adam")),
           **dict.fromkeys(("momentum", "nesterov"), ("sgd", "momentum"))}  # fmt: skip
# The schedule settings only the decaying schedules read (hunt 70: constant ran with
# decay_steps and min_learning_rate unsaid); refused when set away from their defaults, so
# a resolved params file (`min_learning_rate: 0.0`, `decay_steps: null`) runs again
SCHEDULE_READ_BY = dict.fromkeys(("decay_steps", "min_learning_rate"), ("cosine", "linear"))
# The settings in [0, 1): a decay rate of 1 never forgets, above 1 grows (`outside_unit`)
IN_UNIT = ("beta1", "beta2", "momentum")


def outside_unit(where: str, value: float) -> str | None:
    """The line for a setting of IN_UNIT (`where`: its name as written) outside [0, 1)."""
    return None if 0 <= value < 1 else f"{where} must be in [0, 1), got {value}"


def unused_settings(
    opt: Any, base: Any, given: Mapping[str, Any] | None = None, written: Mapping | None = None
) -> str | None:
    """The line naming the settings that `opt`'s optimizer does not read and that are
    set: away from their defaults, or given at all (not null) in the params file's optimizer
    section (`given`, as `load_config` read it). hunt 69: sgd's momentum and adam's
    weight_decay were dropped unsaid (both are read now); beta1 on sgd would have been too.
    Then the schedule settings `opt`'s lr_schedule does not read (`_unused_schedule`).
    `base`: the optimizer's defaults (an `OptimizerConfig` of its type); None when all is read.
    `written`: the settings given ModelZoo's way (`modelzoo_keys.Written` by our dotted key),
    named and dropped as written (hunt 73: `betas: [0.9, 0.95]` with sgd said "drop
    optimizer.beta2=null", which the file's betas set again)."""
    kind = opt.optimizer_type
    named = {k for k, v in (given or {}).items() if v is not None}
    if kind not in OPTIMIZER_NAMES:
        return None  # `_choice` says what it can be
    unused = [
        k
        for k, readers in READ_BY.items()
        if kind not in readers and (k in named or getattr(opt, k) != getattr(base, k))
    ]
    if not unused:
        return _unused_schedule(opt, base)
    keys: dict[str, Any] = {}  # each key as written: its value as written (betas: once)
    for k in unused:
        w = (written or {}).get(f"optimizer.{k}")
        key, value = (w.key, w.value) if w else (f"optimizer.{k}", getattr(opt, k))
        keys.setdefault(key, value)
    said = _listed([f"{k}={_yaml(v)}" for k, v in keys.items()])
    own = _listed([k for k, readers in READ_BY.items() if kind in readers])
    one = len(keys) == 1
    return (
        f"{said} {'has' if one else 'have'} no effect with optimizer_type {kind}, which reads "
        f"{own}; drop {'it' if one else 'them'} ({_unsets(list(keys))}), or use optimizer_type "
        f"{' or '.join(READ_BY[unused[0]])}"
    )


def _unsets(keys: list[str]) -> str:
    """The overrides that drop `keys` (dotted) from a params file: `KEY=null` takes the default
    (hunt 70: a shipped adamw config's beta2 barred `optimizer_type=sgd`, and null was refused)."""
    return " ".join(f"{k}=null" for k in keys)


def _unused_schedule(opt: Any, base: Any) -> str | None:
    """The line naming the schedule settings set away from their defaults that `opt`'s
    lr_schedule does not read, or None."""
    kind = opt.lr_schedule
    unused = [
        k
        for k, readers in SCHEDULE_READ_BY.items()
        if kind not in readers and getattr(opt, k) != getattr(base, k)
    ]
    if kind not in SCHEDULE_NAMES.values() or not unused:
        return None  # `_choice` says what a schedule can be
    said = _listed([f"optimizer.{k}={_yaml(getattr(opt, k))}" for k in unused])
    own = ["learning_rate", "warmup_steps"]
    own += [k for k, readers in SCHEDULE_READ_BY.items() if kind in readers]
    one, drops = len(unused) == 1, _unsets([f"optimizer.{k}" for k in unused])
    return (
        f"{said} {'has' if one else 'have'} no effect with lr_schedule {kind}, which reads "
        f"{_listed(own)}; drop {'it' if one else 'them'} ({drops}), or use lr_schedule "
        f"{' or '.join(SCHEDULE_READ_BY[unused[0]])}"
    )


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _listed(items: list[str]) -> str:
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def scheduler_list(value: Any) -> str:
    """The line for ModelZoo's `learning_rate:` scheduler list (or one scheduler's mapping),
    with its settings here where it is a linear warm-up from 0 and one decay (hunt 69: it
    was refused with a repr of its dicts)."""
    steps = _plain_steps(value)
    same = _translated(steps)
    iters = [s.get("total_iters") for s in steps if isinstance(s, dict)]
    iters = [i for i in iters if type(i) is int and i > 0]  # hunt 79: the example dropped them
    decay = f", decay_steps: {sum(iters)}" if iters else ""  # copied, it decayed over max_steps
    example = f"for this list, {same}" if same else (
        f"e.g. learning_rate: 0.001, warmup_steps: 10, lr_schedule: cosine{decay}, "
        "min_learning_rate: 0.0001")  # fmt: skip
    return (
        "optimizer.learning_rate is a ModelZoo scheduler list; wse train takes one number "
        "plus lr_schedule (constant|cosine|linear), warmup_steps, decay_steps and "
        f"min_learning_rate: {example}"
    )


def _plain_steps(value: Any) -> list[Any]:
    """ModelZoo's scheduler list in its `scheduler: Name` form: `SequentialLR: {schedulers:
    [...]}` is its list, a `{LinearLR: {...}}` item (2.x) is `{scheduler: LinearLR, ...}`
    (hunt 79: those forms got an example without their decay_steps); a last Constant at the
    end rate of the decay before it is what runs after a decay here, and is dropped."""
    if isinstance(value, dict) and len(value) == 1:
        ((name, inner),) = value.items()
        if str(name).casefold() == "sequentiallr" and isinstance(inner, dict):
            value = inner.get("schedulers", value)
    steps = value if isinstance(value, list) else [value]
    out = []
    for step in steps:
        if isinstance(step, dict) and len(step) == 1 and "scheduler" not in step:
            ((name, inner),) = step.items()
            if str(name).casefold() in SCHEDULE_NAMES and isinstance(inner, dict):
                step = {"scheduler": name, **inner}
        out.append(step)
    if len(out) == 3 and all(isinstance(s, dict) for s in out):
        *_, decay, last = out
        flat = SCHEDULE_NAMES.get(str(last.get("scheduler", "")).casefold()) == "constant"
        if flat and last.get("learning_rate") == decay.get("end_learning_rate"):
            out = out[:2]
    return out


def _translated(steps: list[Any]) -> str | None:
    """The settings of [Linear from 0 to the peak,] Constant, CosineDecay or LinearLR."""
    if not 1 <= len(steps) <= 2 or not all(isinstance(s, dict) for s in steps):
        return None
    *warm, tail = steps
    kind = SCHEDULE_NAMES.get(str(tail.get("scheduler", "")).casefold())
    peak = tail.get("initial_learning_rate", tail.get("learning_rate"))
    end, iters = tail.get("end_learning_rate", peak), tail.get("total_iters", 0)
    numbers = all(type(x) in (int, float) for x in (peak, end, iters))
    if kind is None or not numbers or not 0 <= end <= peak or peak <= 0:
        return None
    warmup = 0
    if warm:
        w = warm[0]
        if SCHEDULE_NAMES.get(str(w.get("scheduler", "")).casefold()) != "linear":
            return None
        if w.get("initial_learning_rate", 0) != 0 or w.get("end_learning_rate") != peak:
            return None
        warmup = w.get("total_iters")
        if type(warmup) is not int or warmup <= 0:
            return None
    # warmup_steps: 0 said too: a file's own warm-up would stay (hunt 79)
    parts = [f"learning_rate: {peak}", f"warmup_steps: {warmup}"]
    parts.append(f"lr_schedule: {kind}")
    if kind != "constant" and type(iters) is int and iters > 0:
        parts.append(f"decay_steps: {warmup + iters}")
    return ", ".join(parts + [f"min_learning_rate: {end}"] * (kind != "constant"))
