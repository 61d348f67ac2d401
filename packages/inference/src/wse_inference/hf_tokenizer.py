"""The tokenizer of an HF model folder, read and applied as transformers' AutoTokenizer does.

Contract. `HFTokenizer` is an HF `tokenizers.Tokenizer` behind the engine's `Tokenizer`
protocol, with the chat template and special tokens saved beside it
(`wse_inference.tokenizer_config`). `read_tokenizer_file(path)` reads a tokenizer.json;
`slow_tokenizer(folder, model_type)` reads a folder that has none: a GPT-2 byte-level BPE
(vocab.json + merges.txt, tokenizer_class GPT2Tokenizer, or none and model_type gpt2) is
built as transformers 5's `GPT2Tokenizer` builds it (`gpt2_bpe`), so its ids are
transformers'; any other tokenizer files (a SentencePiece tokenizer.model, a WordPiece
vocab.txt, another class's vocab.json) are a `ModelLoadError` saying to save a
tokenizer.json; None where the folder has no tokenizer files at all (the byte-level fallback
is for those alone; hunt 69: a folder with vocab.json + merges.txt ran on UTF-8 bytes as ids,
exit 0). Both are read once per version of their files.

The truncation and padding a tokenizer.json saves are switched off, as transformers switches
them off unless a call asks (hunt 69: prompts were cut to 2 tokens, or padded to 64).

`encode(text)` is the text as it stands: a chat template's rendering, whose special tokens
the template writes (vLLM's chat passes add_special_tokens=False). `text_ids(tokenizer,
text)` is a text prompt as transformers' `tokenizer(text)` and vLLM's /v1/completions encode
it, with the special tokens the tokenizer's post-processor adds (its BOS); so an empty text is
[bos] with such a tokenizer, and [] without (hunt 69: text prompts ran without their BOS).
`decode(ids)` leaves special tokens out (generated text, vLLM's skip_special_tokens=True);
`ids_text(tokenizer, ids)` writes them, as transformers' decode and vLLM's /detokenize do.
A text the tokenizer cannot encode (a WordLevel whose unk_token is not in its vocabulary) is
a `TokenizerError` naming the file and the tokenizer's words (hunt 69: a traceback, a 500).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wse_core.errors import WseError
from wse_core.host.readers import read_text

from wse_inference.model_files import ModelLoadError, json_file, present
from wse_inference.tokenizer_config import SIDE_FILES, json_object, read_tokenizer_config

__all__ = [
    "HFTokenizer",
    "TokenizerError",
    "gpt2_bpe",
    "ids_text",
    "read_tokenizer_file",
    "slow_tokenizer",
    "text_ids",
]


class TokenizerError(WseError):
    """A text the model's tokenizer cannot encode (a command's exit 2; HTTP 400)."""


class HFTokenizer:
    """An HF `tokenizers.Tokenizer` (`tok`, else read from the tokenizer.json at `path`) with
    the chat template and special tokens saved beside it (`chat_template`, None when there
    is none; `template_vars`, its special tokens)."""

    kind = "tokenizers"

    def __init__(self, path: Path, tok: Any = None):
        from tokenizers import Tokenizer

        self.path = path
        if tok is None:
            try:  # read_text: a regular file within file_bytes (hunt 62: /dev/zero)
                tok = Tokenizer.from_str(read_text(path, "tokenizer"))
            except WseError:
                raise
            except Exception as e:  # tokenizers raises a bare Exception for a bad file
                why = " ".join(str(e).split())[:200]
                raise ModelLoadError(f"{path} is not a readable tokenizer file: {why}") from None
        tok.no_truncation()  # transformers' default: the whole prompt, unpadded (hunt 69)
        tok.no_padding()
        self._tok = tok
        side = read_tokenizer_config(path.parent)
        self._chat_template, self.template_vars, self._template_error = side
        self.max_token_bytes = _max_token_bytes(tok)

    @property
    def chat_template(self) -> str | None:
        """The folder's Jinja chat template (None: none); ModelLoadError where its templates
        hold none to use, raised when a chat needs it as transformers raises it (`wse infer
        serve` renders a chat at start: refused then, unless given --chat-template)."""
        if self._template_error is not None:
            raise ModelLoadError(self._template_error)
        return self._chat_template

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """The ids of `text`; with `add_special_tokens`, the post-processor's too (its BOS)."""
        try:
            return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)
        except Exception as e:  # tokenizers raises a bare Exception (hunt 69)
            why = " ".join(str(e).split())[:200]
            raise TokenizerError(
                f"the tokenizer in {self.path} cannot encode the prompt: {why}"
            ) from None

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """The text of `ids`; special tokens are left out, as vLLM's generated text leaves
        them out (its skip_special_tokens=True), unless `skip_special_tokens` is false."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def vocab(self) -> dict[str, int]:
        return dict(self._tok.get_vocab(with_added_tokens=True))


def text_ids(tokenizer: Any, text: str, *, add_special_tokens: bool = True) -> list[int]:
    """A text prompt's ids (module docstring): an `HFTokenizer`'s with its special tokens
    unless `add_special_tokens` is false; any other tokenizer (bytes) has none to add."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.encode(text, add_special_tokens=add_special_tokens)
    return list(tokenizer.encode(text))


def ids_text(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of `ids` with their special tokens written out, as transformers'
    `tokenizer.decode(ids)` (skip_special_tokens=False, its default) and so vLLM's /detokenize
    write them (hunt 81: "<s><|im_start|>hi<|im_end|>" came back as "hi"); any other
    tokenizer (bytes) has no special tokens to write."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.decode(ids, skip_special_tokens=False)
    return tokenizer.decode(ids)


def _max_token_bytes(tok: Any) -> int | None:
    """The most UTF-8 bytes of text one token stands for, when that is known: a BPE without
    an unknown token or a normalizer spells every token as the text it covers (byte-level
    symbols like 'Ġ' or byte-fallback names like '<0x41>' are longer than their byte), so a
    prompt of B bytes has at least B / this many tokens. None otherwise (a WordPiece's [UNK]
    may cover a long word; a normalizer may shorten text)."""
    from tokenizers import models

    if not isinstance(tok.model, models.BPE) or tok.model.unk_token or tok.normalizer:
        return None
    return max((len(t.encode("utf-8")) for t in tok.get_vocab(with_added_tokens=True)),
               default=None)  # fmt: skip


def read_tokenizer_file(path: Path) -> HFTokenizer:
    """The tokenizer.json at `path`, read once per version of its files: a command checks it
    before the weights and `load_model` takes the same object."""
    return _cached("file", str(path), _stamps([path, *_side(path.parent)]))


# tokenizer files a folder may hold without a tokenizer.json (transformers' slow tokenizers)
_SLOW_FILES = (
    "vocab.json", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
    "vocab.txt", "added_tokens.json", "tekken.json",
)  # fmt: skip
_GPT2 = ("GPT2Tokenizer", "GPT2TokenizerFast")
_SAVE = (
    "save it as tokenizer.json (AutoTokenizer.from_pretrained(dir).save_pretrained(dir), "
    "with transformers) or pass --prompt-ids"
)


def slow_tokenizer(folder: Path, model_type: Any) -> HFTokenizer | None:
    """The tokenizer of a `folder` without tokenizer.json (module docstring); `model_type`:
    config.json's, which chooses the class where tokenizer_config.json names none."""
    found = [name for name in _SLOW_FILES if present(folder / name, "it must be a file")]
    klass = json_object(folder / "tokenizer_config.json").get("tokenizer_class")
    if not found and klass is None:
        return None
    name = klass if klass is not None else ("GPT2Tokenizer" if model_type == "gpt2" else None)
    if name in _GPT2 and {"vocab.json", "merges.txt"} <= set(found):
        files = [folder / "vocab.json", folder / "merges.txt", *_side(folder)]
        return _cached("gpt2", str(folder), _stamps(files))
    what = ", ".join(found) if found else "no tokenizer file"
    if "tokenizer.model" in found:  # transformers converts it with sentencepiece
        what = "tokenizer.model (a SentencePiece tokenizer)"
    if name is not None:
        what += f" of tokenizer_class {name!r:.60}"
    raise ModelLoadError(f"{str(folder)!r} has {what} but no tokenizer.json; {_SAVE}")


def _side(folder: Path) -> list[Path]:
    return [folder / name for name in SIDE_FILES]


def _stamps(files: list[Path]) -> tuple:
    stats = [f.stat() if f.is_file() else None for f in files]
    return tuple((st.st_size, st.st_mtime_ns) if st else None for st in stats)


@functools.lru_cache(maxsize=4)
def _cached(kind: str, path: str, stamps: tuple) -> HFTokenizer:
    del stamps  # the cache key: the files' sizes and times
    try:
        if kind == "file":
            return HFTokenizer(Path(path))
        tok = HFTokenizer(Path(path) / "vocab.json", gpt2_bpe(Path(path)))
        ends = dict(_ENDOFTEXT)  # GPT2Tokenizer's bos, eos and unk (its special_tokens_map)
        tok.template_vars = {**ends, **tok.template_vars}  # where the config names none
        return tok
    except WseError:  # its own words, naming the file at fault (hunt 62)
        raise
    except Exception as err:  # tokenizers raises a bare Exception for a bad file
        why = " ".join(str(err).split())[:300]
        what = repr(path) if kind == "file" else f"the tokenizer in {path!r}"
        raise ModelLoadError(f"cannot read {what}: {why}") from None


# GPT2Tokenizer's special tokens, in the order transformers adds them (ids after the vocab);
# bos, eos and unk are "<|endoftext|>" where tokenizer_config.json names none
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")  # fmt: skip
_ENDOFTEXT = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>"}  # fmt: skip


def gpt2_bpe(folder: Path) -> Any:
    """A `tokenizers.Tokenizer` of the GPT-2 BPE in `folder` (vocab.json, merges.txt and
    tokenizer_config.json), as transformers 5's `GPT2Tokenizer.__init__` builds it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config = json_object(folder / "tokenizer_config.json")
    vocab = json_file(folder / "vocab.json")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ModelLoadError(f"{str(folder / 'vocab.json')!r} must map token text -> id")
    merges = _merges(folder / "merges.txt")
    bpe = models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                     end_of_word_suffix="", fuse_unk=False)  # fmt: skip
    tok = Tokenizer(bpe)
    prefix = bool(config.get("add_prefix_space"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    tok.decoder = decoders.ByteLevel()
    _add_tokens(tok, folder, config)
    _template(tok, config)
    return tok


def _merges(path: Path) -> list[tuple[str, str]]:
    """merges.txt as `tokenizers` reads it: "#version" lines skipped, "a b" per line."""
    lines = read_text(path, "merges").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for n, line in enumerate(lines, 1):
        parts = line.removesuffix("\r").split(" ")
        if line.startswith("#version"):
            continue
        if len(parts) != 2:
            raise ModelLoadError(f"{str(path)!r} line {n} is no merge 'a b': {line!r:.60}")
        out.append((parts[0], parts[1]))
    return out


def _token(value: Any, special: bool = True) -> Any:
    """An `AddedToken` of tokenizer_config.json's string or {"content": ...} object (None:
    no token)."""
    from tokenizers import AddedToken

    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = ("single_word", "lstrip", "rstrip", "normalized", "special")
        kw = {"special": special} | {k: bool(value[k]) for k in flags if k in value}
        return AddedToken(value["content"], **kw)
    return AddedToken(value, special=special) if isinstance(value, str) else None


def _special(config: dict[str, Any], key: str) -> Any:
    """The special token `key` of tokenizer_config.json (GPT-2's default), as an AddedToken."""
    return _token(config.get(key, _ENDOFTEXT.get(key)))


def _add_tokens(tok: Any, folder: Path, config: dict[str, Any]) -> None:
    """The added tokens transformers gives a GPT2Tokenizer: those saved with their ids
    (tokenizer_config.json's added_tokens_decoder, added_tokens.json) in id order, then the
    special tokens; a saved id the tokenizer would not give is refused (save tokenizer.json)."""
    saved = {int(i): _token(v) for i, v in (config.get("added_tokens_decoder") or {}).items()}
    if present(folder / "added_tokens.json", "it must be a JSON file"):
        saved |= {i: _token(t, False) for t, i in json_object(folder / "added_tokens.json").items()}
    for i in sorted(saved):
        add = tok.add_special_tokens if saved[i].special else tok.add_tokens
        add([saved[i]])
        if tok.token_to_id(saved[i].content) != i:
            raise ModelLoadError(
                f"{str(folder)!r}: added token {saved[i].content!r} is saved as id {i}, which "
                f"vocab.json + merges.txt would not give it; {_SAVE}"
            )
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    named = [_special(config, k) for k in _SPECIAL_KEYS] + [_token(t) for t in extra]
    tok.add_special_tokens([t for t in named if t is not None])


def _template(tok: Any, config: dict[str, Any]) -> None:
    """add_bos_token / add_eos_token (GPT-2's default: neither) as a post-processor."""
    from tokenizers import processors

    ends = [_special(config, f"{end}_token") if config.get(f"add_{end}_token") else None
            for end in ("bos", "eos")]  # fmt: skip
    bos, eos = [t.content if t is not None else None for t in ends]
    if bos is None and eos is None:
        return
    single = " ".join(x for x in (bos, "$A", eos) if x)
    pair = " ".join(x for x in (bos, "$A", eos, bos, "$B:1", eos) if x)
    ids = [(t, tok.token_to_id(t)) for t in dict.fromkeys(x for x in (bos, eos) if x)]
    tok.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=ids)
