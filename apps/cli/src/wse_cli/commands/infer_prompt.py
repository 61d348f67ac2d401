"""The prompt of `wse infer generate`: --prompt text or --prompt-ids, checked before any file
is read (`parse_prompt_ids`, `check_utf8`, `check_stop`: the server's bounds on --stop), and
the ids the model runs on (`prompt_ids`). Each refusal is `wse_cli.errors.fail`'s one line."""

from __future__ import annotations

from wse_cli.errors import fail

__all__ = ["check_stop", "check_utf8", "parse_prompt_ids", "prompt_ids"]


def parse_prompt_ids(prompt: str | None, prompt_ids: str | None) -> list[int] | None:
    """--prompt-ids as integers, checked before any file is read (None: --prompt is given)."""
    if (prompt is None) == (prompt_ids is None):
        fail("give exactly one of --prompt TEXT or --prompt-ids 1,2,3")
    if prompt_ids is None:
        return None
    # "1,,2" or a trailing comma is a typo, not a shorter prompt; "1_0", "+1" and other
    # scripts' digits are Python's int() syntax, not token ids (hunt 58: 1_0 was 10)
    parts = [x.strip() for x in prompt_ids.split(",")]
    digits = [x.removeprefix("-") for x in parts]
    if not all(d.isascii() and d.isdigit() for d in digits):
        from wse_core.errors import shown

        fail(f"--prompt-ids must be comma-separated integers (e.g. 1,2,3), got {shown(prompt_ids)}")
    long = next((x for x, d in zip(parts, digits, strict=True) if len(d) > 18), None)
    if long is not None:  # past 64 bits (int() refuses past 4,300 digits with a traceback)
        fail(f"prompt id {long[:20]}... is outside every vocabulary (at most 64 bits)")
    return [int(x) for x in parts]


def check_utf8(name: str, text: str | None) -> None:
    """Refuse text that is not UTF-8 (`wse_core.errors.not_utf8`)."""
    from wse_core.errors import not_utf8, shown

    if (where := not_utf8(text or "")) is not None:
        fail(f"{name} {shown(text)} is not UTF-8 text ({where}); give UTF-8 text")


def check_stop(stop: list[str]) -> None:
    """--stop within the server's bounds (`LIMITS["serve_stop_strings"]` strings, the
    `RequestLimits` 1,024 characters each; hunt 59: 100 stops of 100,000 characters were
    taken)."""
    from wse_core.errors import shown
    from wse_core.host.limits import lift, limit
    from wse_inference.serve.admission import RequestLimits

    most, chars = limit("serve_stop_strings"), RequestLimits.max_stop_chars
    if len(stop) > most:
        fail(
            f"--stop is given {len(stop)} times; give at most {most} stop strings "
            f"({lift('serve_stop_strings')})"
        )
    for s in stop:
        if len(s) > chars:
            fail(f"--stop {shown(s)} is too long; a stop string has at most {chars:,} characters")


def prompt_ids(prompt: str | None, ids: list[int] | None, tokenizer, vocab_size: int):
    """The ids the model runs on: --prompt-ids as given, else --prompt as transformers'
    tokenizer(text) encodes it, with its special tokens (its BOS; hunt 69: none were added,
    so an empty prompt is [bos] where the tokenizer adds one); refused outside the
    vocabulary or empty."""
    if ids is None:
        from wse_inference.hf_tokenizer import text_ids

        ids = text_ids(tokenizer, prompt)
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        fail(f"prompt id {bad[0]} is outside the vocabulary 0..{vocab_size - 1}")
    if not ids:
        fail("the prompt is empty")
    return ids
