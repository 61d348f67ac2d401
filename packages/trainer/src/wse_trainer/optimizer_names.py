"""The optimizer settings' names and rules that both the params file's reader
(`wse_trainer.config`) and its checks (`wse_trainer.config_check`) use: ModelZoo's spellings,
which settings each optimizer and each schedule reads, and the lines for a setting it does
not read (hunts 69, 70) and for ModelZoo's `learning_rate:` scheduler list (hunt 69; its
settings here where it is an optional linear warm-up from 0 and one Constant, CosineDecay,
Linear, Polynomial of power 1 or CosineAnnealing item, else an example that runs as printed:
hunt 81), and the schedule of a section that leaves lr_schedule out (`default_schedule`,
said by `schedule_note`: constant, as ModelZoo runs a number learning_rate, unless the
section gives our decay settings; hunt 81). No wse_trainer import: the reader imports it, so
it cannot import the reader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OPTIMIZER_NAMES", "SCHEDULE_NAMES", "EPS_PLACEMENTS", "READ_BY", "SCHEDULE_READ_BY",
           "unused_settings", "scheduler_list", "IN_UNIT", "outside_unit", "default_schedule",
           "schedule_note", "eps_note"]  # fmt: skip

# ModelZoo's spellings, any case (hunt 69: `AdamW` was refused, "did you mean 'adam'?")
OPTIMIZER_NAMES = {n: n for n in ("adamw", "adam", "sgd", "momentum")}
SCHEDULE_NAMES = {n: n for n in ("constant", "cosine", "linear")} | {"constantlr": "constant",
    "cosinedecay": "cosine", "cosinedecaylr": "cosine", "linearlr": "linear"}  # fmt: skip
# Where adam's eps meets the second moment (`wse_trainer.optimizer.adam_base`): ModelZoo's
# AdamBase, or optax's, which torch.optim.Adam and AdamW share (read in any case)
EPS_PLACEMENTS = {"modelzoo": "modelzoo", "optax": "optax", "torch": "optax"}
# The settings only some optimizers read (as ModelZoo's), and those that do (`refuse_unused`)
READ_BY = {**dict.fromkeys(("beta1", "beta2", "eps", "eps_placement"), ("adamw", "adam")),
           **dict.fromkeys(("momentum", "nesterov"), ("sgd", "momentum"))}  # fmt: skip
# The schedule settings only the decaying schedules read (hunt 70: constant ran with
# decay_steps and min_learning_rate unsaid); refused when set away from their defaults, so
# a resolved params file (`min_learning_rate: 0.0`, `decay_steps: null`) runs again
SCHEDULE_READ_BY = dict.fromkeys(("decay_steps", "min_learning_rate"), ("cosine", "linear"))
# The settings in [0, 1): a decay rate of 1 never forgets, above 1 grows (`outside_unit`)
IN_UNIT = ("beta1", "beta2", "momentum")


def default_schedule(opt: Any) -> str:
    """The lr_schedule of an optimizer section that leaves it out (hunt 81: a ModelZoo params
    file's number learning_rate trained under a cosine decay to 0, unsaid). ModelZoo builds a
    scheduler only for a `learning_rate:` list (`PyTorchBaseModel._configure_optimizer`: a
    float is the optimizer's constant rate), so a section with none of our schedule settings
    runs "constant"; one that gives one (warmup_steps, decay_steps, min_learning_rate: no
    ModelZoo section holds them, the decay reads them) runs this stack's own default,
    "cosine", as before."""
    ours = opt.warmup_steps or opt.decay_steps is not None or opt.min_learning_rate
    return "cosine" if ours else "constant"


def schedule_note(opt: Any) -> str:
    """The line of a run whose optimizer section leaves lr_schedule out: the schedule
    `default_schedule` gave it, and how to choose another."""
    if opt.lr_schedule == "constant":  # no warm-up: it would have made it "cosine"
        return (
            f"note: optimizer.lr_schedule unset: the learning rate is constant at "
            f"{opt.learning_rate}, as ModelZoo runs a number learning_rate (no scheduler); for "
            "a decay give optimizer.lr_schedule: cosine or linear (with decay_steps and "
            "min_learning_rate)"
        )
    warm = f"a linear warm-up of {opt.warmup_steps} steps, then " if opt.warmup_steps else ""
    end = f"step {opt.decay_steps}" if opt.decay_steps is not None else (
        "the last step (runconfig.max_steps; optimizer.decay_steps unset)")  # fmt: skip
    return (
        f"note: optimizer.lr_schedule unset: {warm}a cosine decay from {opt.learning_rate} to "
        f"optimizer.min_learning_rate={opt.min_learning_rate} at {end}, wse train's default "
        "beside warmup_steps, decay_steps or min_learning_rate (a ModelZoo file's number "
        "learning_rate, with none of them, is a constant rate); give optimizer.lr_schedule "
        "to choose: constant, cosine or linear"
    )


def eps_note(opt: Any) -> str | None:
    """The line of an adam or adamw run given `eps_placement: optax`: the form that runs and
    how far it is from ModelZoo's at step 1 (AdamBase's eps, added to sqrt(v) before the bias
    correction, is eps / sqrt(1 - beta2) on the corrected sqrt(v_hat) there); None for
    ModelZoo's own form, which runs unsaid, and for sgd."""
    if opt.optimizer_type not in READ_BY["eps_placement"] or opt.eps_placement != "optax":
        return None
    first = opt.eps / (1.0 - opt.beta2) ** 0.5  # AdamBase's eps on sqrt(v_hat) at step 1
    return (
        f"note: optimizer.eps_placement optax: {opt.optimizer_type}'s eps={opt.eps:g} is added "
        "to sqrt(v_hat) after the bias correction (optax's and torch.optim.AdamW's form), not "
        "to sqrt(v) before it as ModelZoo's AdamBase adds it (there, eps / sqrt(1 - beta2^t) "
        f"on sqrt(v_hat): {first:.3g} at step 1 with beta2={opt.beta2:g}); leave the key out "
        "for ModelZoo's form"
    )


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


# ModelZoo's schedulers read by the translation (`_zoo_kind`), by name in any case: ours
# (SCHEDULE_NAMES), its PolynomialLR (power 1, no cycle: its LinearLR exactly) and its
# CosineAnnealingLR (a cosine from its rate to eta_min over T_max, which does not stop there);
# and the keys each reads (ModelZoo 1.x's factory: `decay_steps` or `steps` for 2.x's
# `total_iters`, `learning_rate` or `base_lr` for `initial_learning_rate`, `t_max` for `T_max`).
# An item with another key is not translated: its key would be dropped unsaid (hunt 81)
_ZOO_NAMES = {"polynomial": "polynomial", "polynomiallr": "polynomial",
              "cosineannealing": "annealing", "cosineannealinglr": "annealing"}  # fmt: skip
_RATES = ("initial_learning_rate", "learning_rate", "base_lr")
_ITERS = ("total_iters", "decay_steps", "steps")
_READS = {
    "constant": {*_RATES, *_ITERS},
    "linear": {*_RATES, "end_learning_rate", *_ITERS, "power", "cycle"},
    "polynomial": {*_RATES, "end_learning_rate", *_ITERS, "power", "cycle"},
    "cosine": {*_RATES, "end_learning_rate", *_ITERS},
    "annealing": {*_RATES, "T_max", "t_max", "eta_min"},
}
# The generic example's warm-up (steps), and its decay past it: a list of no more steps than
# this warms up over half of them (hunt 81: `warmup_steps: 10, decay_steps: 8`, copied as
# printed, was refused "decay_steps=8 is not past optimizer.warmup_steps=10")
EXAMPLE_WARMUP = 10


def scheduler_list(value: Any) -> str:
    """The line for ModelZoo's `learning_rate:` scheduler list (or one scheduler's mapping),
    with its settings here where it is a linear warm-up from 0 and one decay (hunt 69: it
    was refused with a repr of its dicts); else an example that runs as printed."""
    steps = _plain_steps(value)
    same = _translated(steps)
    iters = [_first(s, _ITERS + ("T_max", "t_max")) for s in steps if isinstance(s, dict)]
    iters = [i for i in iters if type(i) is int and i > 0]  # hunt 79: the example dropped them
    total = sum(iters)
    warm = EXAMPLE_WARMUP if not iters or total > EXAMPLE_WARMUP else total // 2
    decay = f", decay_steps: {total}" if iters else ""  # copied, it decayed over max_steps
    example = f"for this list, {same}" if same else (
        f"{_unread(steps)}e.g. learning_rate: 0.001, warmup_steps: {warm}, lr_schedule: "
        f"cosine{decay}, min_learning_rate: 0.0001")  # fmt: skip
    return (
        "optimizer.learning_rate is a ModelZoo scheduler list; wse train takes one number "
        "plus lr_schedule (constant|cosine|linear), warmup_steps, decay_steps and "
        f"min_learning_rate: {example}"
    )


def _unread(steps: list[Any]) -> str:
    """Where an item of a scheduler read here holds a key its translation does not read, the
    words naming the first such key (hunt 81: `main_scheduler` was dropped unsaid), else ""."""
    for step in steps:
        if kind := _zoo_kind(step):
            if extra := sorted(str(k) for k in set(step) - {"scheduler"} - _READS[kind]):
                name = step["scheduler"]
                return f"no translation ({name}'s {extra[0]} has no setting here); "
    return ""


def _zoo_kind(step: Any) -> str | None:
    """The kind of one scheduler item: ours (constant, cosine, linear), "polynomial",
    "annealing", or None (another scheduler, or no mapping)."""
    if not isinstance(step, dict):
        return None
    name = str(step.get("scheduler", "")).casefold()
    return _ZOO_NAMES.get(name) or SCHEDULE_NAMES.get(name)


def _first(step: dict[str, Any], keys: tuple[str, ...], default: Any = None) -> Any:
    """The value of the first of `keys` that `step` holds (ModelZoo's spellings of one key)."""
    return next((step[k] for k in keys if k in step), default)


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
            if _zoo_kind({"scheduler": name}) and isinstance(inner, dict):
                step = {"scheduler": name, **inner}
        out.append(step)
    if len(out) == 3 and all(isinstance(s, dict) for s in out):
        *_, decay, last = out
        flat = _zoo_kind(last) == "constant"
        end = decay.get("end_learning_rate", decay.get("eta_min"))
        if flat and _first(last, _RATES) == end:
            out = out[:2]
    return out


def _is_linear(step: dict[str, Any]) -> bool:
    """A LinearLR, or a PolynomialLR of power 1 and no cycle (ModelZoo's LinearLR exactly:
    initial + (end - initial) x min(t, T) / T), reading no key besides theirs."""
    kind = _zoo_kind(step)
    if kind not in ("linear", "polynomial") or set(step) - {"scheduler"} - _READS[kind]:
        return False
    power = step.get("power", 1.0)
    return type(power) in (int, float) and power == 1 and step.get("cycle", False) is False


def _tail(step: dict[str, Any]) -> tuple[str, Any, Any, Any] | None:
    """(our lr_schedule, its peak, end rate and steps) of one Constant, CosineDecay, Linear,
    Polynomial of power 1 or CosineAnnealing item reading no other key, or None."""
    kind = _zoo_kind(step)
    if kind is None or set(step) - {"scheduler"} - _READS[kind]:
        return None
    if kind in ("linear", "polynomial") and not _is_linear(step):
        return None
    peak = _first(step, _RATES)
    if kind == "annealing":
        return "cosine", peak, step.get("eta_min", 0.0), _first(step, ("T_max", "t_max"))
    end = step.get("end_learning_rate", peak)
    return ("linear" if kind == "polynomial" else kind), peak, end, _first(step, _ITERS, 0)


def _translated(steps: list[Any]) -> str | None:
    """The settings of [Linear from 0 to the peak,] Constant, CosineDecay, Linear (or
    Polynomial of power 1) or CosineAnnealing, or None."""
    if not 1 <= len(steps) <= 2 or not all(isinstance(s, dict) for s in steps):
        return None
    *warm, last = steps
    tail = _tail(last)
    if tail is None:
        return None
    kind, peak, end, iters = tail
    numbers = all(type(x) in (int, float) for x in (peak, end, iters))
    if not numbers or not 0 <= end <= peak or peak <= 0:
        return None
    annealing = _zoo_kind(last) == "annealing"
    if annealing and not (type(iters) is int and iters > 0):
        return None  # T_max: ModelZoo's factory requires it
    warmup = 0
    if warm:
        w = warm[0]
        if not _is_linear(w) or _first(w, _RATES, 0) != 0 or w.get("end_learning_rate") != peak:
            return None
        warmup = _first(w, _ITERS)
        if type(warmup) is not int or warmup <= 0:
            return None
    # warmup_steps: 0 said too: a file's own warm-up would stay (hunt 79)
    parts = [f"learning_rate: {peak}", f"warmup_steps: {warmup}"]
    parts.append(f"lr_schedule: {kind}")
    if kind != "constant" and type(iters) is int and iters > 0:
        parts.append(f"decay_steps: {warmup + iters}")
    said = ", ".join(parts + [f"min_learning_rate: {end}"] * (kind != "constant"))
    if not annealing:
        return said
    # ModelZoo's CosineAnnealingLR (eta_min + (initial - eta_min) (1 + cos(pi t / T_max)) / 2,
    # t unbounded) is the cosine decay here through its count T_max, the step after the
    # warm-up and T_max; it rises again after, where the decay here stays at eta_min
    return (
        f"{said}; ModelZoo's CosineAnnealing rises again past T_max {iters} (its cosine "
        f"does not stop at eta_min), which no schedule here does: the rates are the same for "
        f"runconfig.max_steps up to {warmup + iters + 1}"
    )
