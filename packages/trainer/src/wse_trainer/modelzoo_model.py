"""ModelZoo's model-section keys whose meaning here depends on the model, read once its arch and
its preset are known (`session.model_config`; the file's reader says them beside its other
lines, `config_read._model_keys`).

- `nonlinearity` moves to our `mlp_activation` by the arch (gpt2: one activation; llama:
  gated), and the settings the arch fixes (`_BY_ARCH`: positions, norms, biases, dropout, the
  embeddings' scale) are dropped at the value the model runs, else refused
  saying what runs (hunt 76: "did you mean 'tie_embeddings'?"). A key at the other arch's value
  names `model.arch: <other>`, and two or more such keys are one line (hunt 80: a ModelZoo
  Llama file, which names no preset, met six refusals "use a llama preset"; model.arch: llama,
  which runs it, was named nowhere).
- Grouped-query attention (hunt 80: refused with no hint): ModelZoo's `attention_module`
  (`aiayn_attention`, its default: every head its own keys and values;
  `multiquery_attention`: `extra_attention_params.num_kv_groups` key/value heads, 1 when not
  given, as its `MultiQueryAttention.check_extra_params`) is our `n_kv_heads`, which must
  divide the heads (ModelZoo asserts it). gpt2 has no grouped-query attention here (HF's
  GPT2Config neither).
- `loss_scaling` and `loss_weight` (`_loss`): num_tokens at 1.0 is the loss that runs, the
  mean over the batch's tokens; batch_size with loss_weight 1/max_sequence_length is too, as
  every row here is full (hunt 82: refused, though ModelZoo's params table recommends it with
  gradient accumulation); another weight is refused naming the factor it would scale by.
- `rotary_dim`: rotary embeddings here turn each head's whole dimension; ModelZoo's default
  and its Llama files' value (hidden_size / num_heads) is read, a partial rotation refused.
- The initial weights (`modelzoo_init.INIT_KEYS`): at ModelZoo's default scale, or the draw
  that runs here, read with a note; another refused (`modelzoo_init`).
- `mixed_precision` and `fp16_type` are model.dtype (`_precision`; hunt 81: refused, their
  own notes saying what they mean): true with bfloat16 (or cbfloat16, Cerebras' CB16, run as
  bfloat16 with a note, as ModelZoo runs it off a CS system) is bfloat16, false float32;
  float16, ModelZoo's default fp16_type, is refused. ModelZoo 1.x's `use_bfloat16`
  (`PyTorchBaseModel`: true sets its half type to bfloat16; hunt 82: an unknown key) is read
  as fp16_type bfloat16, false as its float16 (which runs only with mixed_precision false).
- `precision_opt_level` (ModelZoo 1.x's model key, its runconfig's since) is read as
  runconfig's (`modelzoo_ignored.ignored`).
- A model given its heads alone takes as many key/value heads where its preset's count means
  nothing: gpt2 (no grouped-query attention: ModelZoo's GPT-2 and HF's GPT2Config give its
  heads alone), and a model whose arch is not its preset's (ModelZoo's default attention;
  hunt 80: a Llama file over tiny-gpt2 would take tiny-gpt2's 4 key/value heads).

`base_of()` gives the model's preset (a `wse_models.ModelConfig`), asked only where a key needs
it: its arch, heads, layers and sizes where the section does not give them. `zoo_keys(section)`
lists ModelZoo's keys a section reads as ours. Imports only `modelzoo_keys`,
`modelzoo_ignored` and `modelzoo_init` of wse_trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from wse_core.errors import shown_value

from wse_trainer.modelzoo_ignored import ignored
from wse_trainer.modelzoo_init import INIT_KEYS, initial_problem
from wse_trainer.modelzoo_keys import MODELZOO_KEYS, yaml_text

__all__ = ["MODEL_VALUES", "NONLINEARITIES", "ModelRead", "model_values",
           "read_model", "zoo_keys"]  # fmt: skip

# ModelZoo's `nonlinearity` (its `layers/activations.py` names, read in any case, as its
# `get_activation`) -> (our mlp_activation, gated). The gating is the arch's here: gpt2
# applies one activation to the up projection, llama gates (act(gate) * up). ModelZoo's
# "gelu" and "geglu" are torch's erf GELU; ours is the tanh form (HF's gelu_new), at most
# 4.7e-4 from it (at x = 2.70)
NONLINEARITIES = {"gelu": ("gelu", False), "gelu_new": ("gelu", False),
                  "gelu_fast": ("gelu", False), "relu": ("relu", False),
                  "squared_relu": ("relu2", False), "silu": ("silu", False),
                  "swish": ("silu", False), "swiglu": ("silu", True), "reglu": ("relu", True),
                  "geglu": ("gelu", True)}  # fmt: skip
_DROPOUT = ("dropout_rate", "embedding_dropout_rate", "attention_dropout_rate")
# ModelZoo's model keys whose value the arch fixes here: (gpt2's, llama's), and what runs;
# a key at the model's own value is dropped, at another refused with that line
_BY_ARCH = {
    "position_embedding_type": (("learned", "rotary"), "positions are the arch's here"),
    "norm_type": (("layernorm", "rmsnorm"), "the norm is the arch's here"),
    **{k: ((True, False), "biases are the arch's here")
       for k in ("use_projection_bias_in_attention", "use_ffn_bias_in_attention",
                 "use_ffn_bias")},
    "use_bias_in_output": ((False, False), "the output layer has no bias here"),
    "attention_type": (("scaled_dot_product",) * 2, "attention is scaled dot product here"),
    **{k: ((0.0, 0.0), "there is no dropout here") for k in _DROPOUT},
    # hunt 80: "did you mean 'tie_embeddings'?" (ModelZoo's defaults: true, 1.0)
    "use_position_embedding": (
        (True, True), "every model here has positions (gpt2 learned, llama rotary)"
    ),
    "embeddings_scale": ((1.0, 1.0), "the embeddings are not scaled here"),
}  # fmt: skip
_ATTENTION = ("attention_module", "extra_attention_params")
_LOSS = ("loss_scaling", "loss_weight")
# A loss_weight is 1 / max_sequence_length where weight x length is 1 within this: a weight
# written to 7 significant digits (1/2048 = 0.0004882812: 1.1e-7 off) passes; ModelZoo's own
# files write the exact 0.00048828125
LOSS_WEIGHT_RTOL = 1e-6
_PRECISION = ("mixed_precision", "fp16_type", "use_bfloat16")  # the last: ModelZoo 1.x's
MODEL_VALUES = frozenset(
    {"nonlinearity", *_BY_ARCH, *_ATTENTION, *_LOSS, *_PRECISION, "rotary_dim", *INIT_KEYS,
     "precision_opt_level"}
)  # fmt: skip
# ModelZoo's fp16_type names (its cstorch.amp.set_half_dtype's) -> the model.dtype that runs
# them here (None: none); unset, mixed precision is float16, ModelZoo's default
# (`half_dtype.set_half_dtype_from_params`: params.get("fp16_type", "float16"))
HALF_TYPES = {"bfloat16": "bfloat16", "cbfloat16": "bfloat16", "float16": None}
_MODULES = {
    "aiayn_attention": "every head its own keys and values",
    "multiquery_attention": "extra_attention_params.num_kv_groups key/value heads",
}
# A divisor named in a refusal is searched below this many heads only (a bounded loop)
_DIVISOR_SEARCH = 1 << 16


class ModelRead(NamedTuple):
    """The model section read: `fields` in our keys (ModelZoo's `MODEL_VALUES` dropped, their
    values moved), the `lines` why it cannot run (in the section's order), and the keys read
    with a note, by their `modelzoo_ignored.IGNORED_NOTES` key."""

    fields: dict[str, Any]
    lines: list[str]
    notes: dict[str, list[str]]


def zoo_keys(section: str) -> list[str]:
    """ModelZoo's keys of `section` read as ours (moved, or `MODEL_VALUES`)."""
    moved_keys = [k for s, k in MODELZOO_KEYS if s == section]
    return moved_keys + (sorted(MODEL_VALUES) if section == "model" else [])


def _agrees(value: Any, ours: Any) -> bool:
    """Whether a ModelZoo value is ours: text in any case, numbers by value, bools as bools."""
    if isinstance(ours, str):
        return isinstance(value, str) and value.casefold() == ours
    if isinstance(ours, bool) or isinstance(value, bool):
        return value is ours
    return isinstance(value, int | float) and value == ours


def _count(value: Any) -> bool:
    return type(value) is int and value >= 1


def _fix(other: str) -> str:
    return f"give model.arch: {other} (or a {other} preset)"


def _nonlinearity(value: Any, arch: str) -> tuple[str | None, str | None, str | None]:
    """(our mlp_activation, None, None) for ModelZoo's nonlinearity on `arch`, or (None, why,
    the key and value where they are the other arch's)."""
    gated = arch == "llama"
    names = [k for k, (_, g) in NONLINEARITIES.items() if g == gated]
    use = f"use one of {', '.join(names)} (this model is {arch})"
    if not isinstance(value, str) or value.casefold() not in NONLINEARITIES:
        why = f"model.nonlinearity {shown_value(value)} has no equivalent here; {use}"
        return None, why, None
    ours, its_gated = NONLINEARITIES[value.casefold()]
    if its_gated != gated:
        kind = "a gated MLP (act(gate) * up)" if its_gated else "an MLP of one activation"
        other = "llama" if its_gated else "gpt2"
        return (
            None,
            (
                f"model.nonlinearity {value!r} is {kind}, the {other} arch's here; {use}, or "
                f"{_fix(other)}"
            ),
            f"model.nonlinearity {value!r}",
        )
    return ours, None, None


def _by_arch(key: str, value: Any, arch: str) -> tuple[str | None, str | None]:
    """(None, None) for a `_BY_ARCH` key at the value `arch` runs, else (why, the key and
    value where they are the other arch's)."""
    values, runs = _BY_ARCH[key]
    mine, theirs = values[arch == "llama"], values[arch != "llama"]
    if _agrees(value, mine):
        return None, None
    other = _agrees(value, theirs)
    fix = f"{_fix('gpt2' if arch == 'llama' else 'llama')} to run it" if other else (
        f"give {yaml_text(mine)}")  # fmt: skip
    return (
        f"model.{key} {yaml_text(value)}: {runs}, and this {arch} model runs "
        f"{yaml_text(mine)}; {fix}, or leave the key out"
    ), f"model.{key} {yaml_text(value)}" if other else None


def _setting(fields: Mapping[str, Any], base: Any, key: str) -> Any:
    return fields[key] if key in fields else getattr(base, key, None)


def _divisor_below(n: int, k: int) -> int:
    """The largest divisor of `n` at most `k` (1 past `_DIVISOR_SEARCH`)."""
    if n > _DIVISOR_SEARCH:
        return 1
    return next(d for d in range(min(k, n), 0, -1) if n % d == 0)


def _kv_heads(fields: Mapping[str, Any], heads: Any) -> tuple[Any, str | None]:
    """(the key/value heads ModelZoo's attention keys give, None), or (None, why): module
    docstring; `heads`: the model's query heads."""
    module, extra = fields.get("attention_module"), fields.get("extra_attention_params")
    name = module.casefold() if isinstance(module, str) else module
    if module is not None and name not in _MODULES:
        kinds = "; ".join(f"{k} ({v})" for k, v in _MODULES.items())
        return (
            None,
            f"model.attention_module {shown_value(module)} has no equivalent here; give {kinds}",
        )
    if extra is not None and not isinstance(extra, Mapping):
        return None, (
            "model.extra_attention_params must be a mapping (num_kv_groups: the key/value "
            f"heads of multiquery_attention), got {shown_value(extra)}"
        )
    extra = dict(extra or {})
    if unknown := sorted(str(k) for k in extra if k != "num_kv_groups"):
        return None, (
            f"model.extra_attention_params.{unknown[0]} has no equivalent here; it takes "
            "num_kv_groups (the key/value heads of multiquery_attention) only"
        )
    groups = extra.get("num_kv_groups", 1)
    if name in (None, "aiayn_attention"):
        if not extra:
            return heads, None
        which = "aiayn_attention, its default," if module is None else "aiayn_attention"
        return None, (
            "model.extra_attention_params is read by attention_module multiquery_attention "
            f"only (ModelZoo's {which} takes none); give model.attention_module: "
            f"multiquery_attention for num_kv_groups {shown_value(groups)} key/value heads, or "
            "leave extra_attention_params out"
        )
    if not _count(groups):
        return None, (
            "model.extra_attention_params.num_kv_groups must be a count >= 1 (key/value "
            f"heads), got {shown_value(groups)}"
        )
    if _count(heads) and heads % groups:
        return None, (
            f"model.extra_attention_params.num_kv_groups {groups} does not divide the model's "
            f"{heads} attention heads (each key/value head serves an equal group of query "
            f"heads, as ModelZoo's MultiQueryAttention asserts); give a divisor of {heads}, "
            f"e.g. {_divisor_below(heads, groups)}"
        )
    return groups, None


def _attention(
    fields: Mapping[str, Any], base: Any, arch: str, out: dict[str, Any]
) -> tuple[str | None, str | None]:
    """Set `out`'s n_kv_heads from ModelZoo's attention keys: (None, None), or (why, what is
    the other arch's: grouped-query attention on a gpt2)."""
    heads = _setting(fields, base, "n_heads")
    kv, why = _kv_heads(fields, heads)
    if why:
        return why, None
    if arch == "gpt2" and kv != heads:
        return (
            f"model.attention_module multiquery_attention with {kv} key/value head(s) for "
            f"{heads} heads is grouped-query attention, the llama arch's here: this gpt2 "
            f"model gives every head its own (as HF's GPT-2); {_fix('llama')} to run it, or "
            f"give num_kv_groups {heads}"
        ), f"model.attention_module multiquery_attention ({kv} key/value heads of {heads})"
    given = fields.get("n_kv_heads")
    if given is not None and given != kv:
        return (
            f"model.attention_module and extra_attention_params give model.n_kv_heads {kv}, "
            f"and model.n_kv_heads is {shown_value(given)}; give it once"
        ), None
    out["n_kv_heads"] = kv
    return None, None


def _precision(fields: Mapping[str, Any], out: dict[str, Any]) -> tuple[str | None, str | None]:
    """Set `out`'s dtype from ModelZoo's `mixed_precision` and `fp16_type` (hunt 81: refused,
    though their own notes said what they mean): (None, the note key), or (why, None).
    mixed_precision true is 16-bit compute over fp32 master weights in fp16_type, which is
    model.dtype bfloat16 here for bfloat16, and for cbfloat16 too (Cerebras' CB16, 6 exponent
    and 9 mantissa bits, runs on a CS system only: ModelZoo itself runs bfloat16 in its place
    elsewhere, `run_cstorch_flow`); float16, ModelZoo's default, does not run here. false is
    float32. fp16_type without mixed_precision true is read by nothing (ModelZoo's
    mixed_precision defaults to false)."""
    mixed, half = fields.get("mixed_precision"), fields.get("fp16_type")
    name = half.casefold() if isinstance(half, str) else half
    if mixed is not None and not isinstance(mixed, bool):
        return f"model.mixed_precision must be true or false, got {yaml_text(mixed)}", None
    if half is not None and name not in HALF_TYPES:
        return (
            f"model.fp16_type must be one of {', '.join(HALF_TYPES)} (ModelZoo's 16-bit types), "
            f"got {yaml_text(half)}"
        ), None
    b16 = fields.get("use_bfloat16")
    if why := _bfloat16_problem(b16, half, name):
        return why, None
    if b16 and half is None:  # ModelZoo 1.x's bf16 switch: fp16_type bfloat16 (hunt 82)
        half = name = "bfloat16"
    if name == "float16" or (mixed and half is None):
        given = "model.mixed_precision true with no fp16_type (ModelZoo's default: float16)"
        if half is not None:
            given = "model.fp16_type float16"
        elif b16 is not None:
            given = "model.mixed_precision true with use_bfloat16 false (ModelZoo 1.x's float16)"
        return (
            f"{given}: there is no float16 here (model.dtype float32 or bfloat16, whose 8-bit "
            "exponent needs no loss scaling); give model.fp16_type: bfloat16 (model.dtype "
            "bfloat16: 16-bit compute over fp32 master weights), or mixed_precision: false"
        ), None
    if mixed is None:
        return None, "fp16_unread" if half is not None or b16 is not None else None
    dtype = HALF_TYPES[name] if mixed else "float32"
    given = fields.get("dtype")
    if given is not None and given != dtype:
        return (
            f"model.mixed_precision {yaml_text(mixed)}"
            f"{f' with fp16_type {half}' if mixed else ''} gives model.dtype {dtype}, and "
            f"model.dtype is {shown_value(given)}; give it once"
        ), None
    out["dtype"] = dtype
    return None, "cbfloat16" if name == "cbfloat16" and mixed else f"precision_{dtype}"


def _loss(fields: Mapping[str, Any], seq_lens: tuple[int, ...]) -> tuple[str | None, str | None]:
    """(None, the note key or None) for ModelZoo's `loss_scaling` and `loss_weight` where they
    give the loss that runs, the mean over the batch's tokens, else (why, None). Its
    GPTLMHeadModelLoss (modelzoo/common/pytorch/model_utils/GPTLMHeadModelLoss.py): num_tokens
    is the sum over the attention mask's tokens / their count, and asserts loss_weight 1.0;
    batch_size is that sum / the batch's rows x loss_weight, which its params table
    recommends with gradient accumulation, "generally" at 1/max_sequence_length. Every row
    here holds its max_sequence_length targets (packed, no padding: `reference.loss_fn`), so
    batch_size is the token mean x (loss_weight x max_sequence_length): the same loss where
    that is 1 for each split's length `seq_lens` (hunt 82: refused, though the same)."""
    scaling, weight = fields.get("loss_scaling", "num_tokens"), fields.get("loss_weight", 1.0)
    kind = scaling.casefold() if isinstance(scaling, str) else scaling
    if kind not in ("num_tokens", "batch_size"):
        return (
            f"model.loss_scaling {yaml_text(scaling)} is none of ModelZoo's (num_tokens: the "
            "mean over the batch's tokens, the loss here; batch_size: their sum over the "
            "batch's rows x loss_weight); give num_tokens, or leave the key out"
        ), None
    if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
        return f"model.loss_weight must be a positive number, got {yaml_text(weight)}", None
    if kind == "num_tokens":
        if weight == 1.0:
            return None, None
        return (
            f"model.loss_weight {yaml_text(weight)} with loss_scaling num_tokens: ModelZoo "
            "asserts 1.0 there, and the loss here is the mean over the batch's tokens; give "
            "1.0 (or loss_scaling batch_size with loss_weight 1/max_sequence_length), or leave "
            "the key out"
        ), None
    off = [n for n in seq_lens if abs(weight * n - 1.0) > LOSS_WEIGHT_RTOL]
    if not off:
        return None, "loss_batch_size"
    n = off[0]
    return (
        f"model.loss_scaling batch_size with model.loss_weight {yaml_text(weight)}: ModelZoo's "
        "loss is the batch's token sum over its rows x loss_weight, and each row here holds "
        f"max_sequence_length {n} targets (packed, no padding), so it would be the mean over "
        f"the batch's tokens x {weight * n:.6g}, the loss and its gradients scaled by that; "
        f"the loss here is that mean: give loss_weight 1/{n} = {1 / n!r}, or loss_scaling "
        "num_tokens, or leave both out"
    ), None


def _bfloat16_problem(b16: Any, half: Any, name: Any) -> str | None:
    """The line for ModelZoo 1.x's `use_bfloat16` (`PyTorchBaseModel`: its half type,
    bfloat16 when true, else float16; ModelZoo 2.x refuses the key for fp16_type) that is no
    boolean or names another type than `fp16_type` `half` (`name`: its casefold), or None."""
    if b16 is None:
        return None
    if not isinstance(b16, bool):
        return (
            f"model.use_bfloat16 must be true or false (ModelZoo 1.x's 16-bit type: true "
            f"bfloat16, false float16), got {yaml_text(b16)}"
        )
    if half is None or (name != "float16") == b16:
        return None
    return (
        f"model.use_bfloat16 {yaml_text(b16)} (ModelZoo 1.x's {'b' * b16}float16) and "
        f"model.fp16_type {yaml_text(half)} name two 16-bit types; give fp16_type alone "
        "(ModelZoo 2.x's, which refuses use_bfloat16)"
    )


def _rotary(fields: Mapping[str, Any], base: Any, arch: str) -> tuple[str | None, str | None]:
    """rotary_dim: (None, None) where it turns each head's whole dimension, else the line
    (and the key and value on a gpt2, whose positions are learned)."""
    value = fields["rotary_dim"]
    if arch != "llama":
        return (
            f"model.rotary_dim {shown_value(value)}: rotary positions are the llama arch's "
            f"here, and this {arch} model's are learned; {_fix('llama')} to run it, or leave "
            "the key out"
        ), f"model.rotary_dim {shown_value(value)}"
    d, heads = _setting(fields, base, "d_model"), _setting(fields, base, "n_heads")
    hd = _setting(fields, base, "head_dim")
    if hd is None and _count(d) and _count(heads):
        hd = d // heads
    if not _count(hd) or (type(value) is int and value == hd):
        return None, None  # a head_dim that cannot be is the model's refusal
    return (
        f"model.rotary_dim {shown_value(value)}: rotary position embeddings here turn each "
        f"head's whole {hd} dims (ModelZoo's default, hidden_size / num_heads); a partial "
        f"rotation does not run here: give {hd}, or leave the key out"
    ), None


def read_model(
    fields: Mapping[str, Any], base_of: Callable[[], Any], seq_lens: tuple[int, ...] = ()
) -> ModelRead:
    """The model section's `fields` read for a model whose preset `base_of()` gives, asked
    only where it matters (module docstring); `seq_lens`: the max_sequence_length of each
    split the run reads (`_loss`)."""
    heads_alone = "n_heads" in fields and "n_kv_heads" not in fields
    if not (MODEL_VALUES & fields.keys() or heads_alone):
        return ModelRead(dict(fields), [], {})
    base = base_of()
    arch = str(fields.get("arch") or base.arch)
    out, lines, notes = dict(fields), [], {}  # lines: (line, the other arch's key and value)
    if heads_alone and (arch == "gpt2" or arch != base.arch):
        out["n_kv_heads"] = fields["n_heads"]
    said_attention = said_precision = said_loss = False
    for key, value in fields.items():
        why, other = None, None
        if key == "nonlinearity":
            ours, why, other = _nonlinearity(value, arch)
            given = fields.get("mlp_activation")
            if why is None and given is not None and given != ours:
                why = (f"model.nonlinearity {value!r} gives model.mlp_activation {ours!r}, and "
                       f"model.mlp_activation is {given!r}; give it once")  # fmt: skip
            out["mlp_activation"] = ours
        elif key in _BY_ARCH:
            why, other = _by_arch(key, value, arch)
        elif key in _ATTENTION and not said_attention:
            said_attention = True
            why, other = _attention(fields, base, arch, out)
        elif key in _LOSS:
            if not said_loss:
                said_loss = True
                why, note = _loss(fields, seq_lens)
                if note:
                    notes.setdefault(note, []).extend(f"model.{k}" for k in _LOSS if k in fields)
        elif key in _PRECISION:
            if not said_precision:
                said_precision = True
                why, note = _precision(fields, out)
                if note:
                    notes.setdefault(note, []).extend(f"model.{k}" for k in _PRECISION
                                                       if k in fields)  # fmt: skip
        elif key == "rotary_dim":
            why, other = _rotary(fields, base, arch)
        elif key in INIT_KEYS:
            layers = _setting(fields, base, "n_layers")
            if not (why := initial_problem(fields, layers, key)):
                notes.setdefault("init", []).append(f"model.{key}")
        elif key == "precision_opt_level" and (read := ignored("model", key, value)):
            if not (why := read.why):
                notes.setdefault(str(read.note), []).append(f"model.{key}")
        elif key not in MODEL_VALUES:
            continue
        out.pop(key, None)
        if why:
            lines.append((why, other))
    return ModelRead(out, _merged(lines, fields, base, arch), notes)


def _merged(
    lines: list[tuple[str, str | None]], fields: Mapping[str, Any], base: Any, arch: str
) -> list[str]:
    """`lines` with two or more of the other arch's said in one, at the first's place."""
    theirs = [item for _, item in lines if item]
    if len(theirs) < 2:
        return [line for line, _ in lines]
    other = "gpt2" if arch == "llama" else "llama"
    named = ", ".join(theirs)
    whence = "" if "arch" in fields else f" (preset {base.name}'s arch)"
    one = (
        f"{named} are the {other} arch's here, and this model is {arch}{whence}; "
        f"{_fix(other)} to run them, or leave them out"
    )
    out, said = [], False
    for line, item in lines:
        if not item:
            out.append(line)
        elif not said:
            out.append(one)
            said = True
    return out


def model_values(
    fields: Mapping[str, Any], base_of: Callable[[], Any], seq_lens: tuple[int, ...] = ()
) -> tuple[dict[str, Any], str | None]:
    """(the model section's `fields` in our keys, None), or (`fields`, the first line why
    not): `read_model`'s."""
    read = read_model(fields, base_of, seq_lens)
    return (read.fields, None) if not read.lines else (dict(fields), read.lines[0])
