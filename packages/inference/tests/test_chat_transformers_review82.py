"""Review 82, hole 1: a server built on a transformers tokenizer (the Python API takes one:
its `apply_chat_template` renders the chat) took `list(apply_chat_template(...,
tokenize=True))` as the prompt. In transformers 5 that call returns a BatchEncoding, so every
chat's prompt was its keys, ['input_ids', 'attention_mask']. And a request's
chat_template_kwargs reached the call's own parameters: {"truncation": true, "max_length": 2}
cut the server's prompt to 2 tokens.

Now the chat is rendered to text (tokenize=False) and the text tokenized without special
tokens, as vLLM renders and tokenizes a chat (vllm/renderers/hf.py, `safe_apply_chat_template`
then the prompt's own tokenization, add_special_tokens False for chats), and only template
variables reach the render. Oracles: the rendered text written by hand from the template, its
tokens from the `tokenizers` BPE itself (trained here, no hub), and transformers' own
tokenize=True ids (`input_ids`).
"""

from __future__ import annotations

import pytest
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.chat_template import chat_prompt, template_kwargs

transformers = pytest.importorskip("transformers")

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not "
    "enable_thinking %}<nothink>{% endif %}{% endif %}"
)
CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello wafer"}]


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE trained here, whose encode adds <s> (a TemplateProcessing, as Llama's
    tokenizer.json does), and the transformers tokenizer over it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<nothink>"]
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    raw.train_from_iterator(["hello wafer, be brief. the wafer is a chip"] * 20, trainer)
    bos = raw.token_to_id("<s>")
    raw.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>",
                                               eos_token="</s>")  # fmt: skip
    tok.chat_template = TEMPLATE
    return raw, tok


def _by_hand(generation: bool = True, thinking: bool = True) -> str:
    text = "<s><|system|>be brief\n<|user|>hello wafer\n"
    return text + ("<|assistant|>" + ("" if thinking else "<nothink>") if generation else "")


def test_the_prompt_is_the_rendered_texts_tokens(bpe):
    raw, tok = bpe
    ids = chat_prompt(CHAT, tok)
    want = raw.encode(_by_hand(), add_special_tokens=False).ids
    assert ids == want  # before: ['input_ids', 'attention_mask']
    assert ids.count(raw.token_to_id("<s>")) == 1  # the template's <s>, not a second one
    out = tok.apply_chat_template(CHAT, tokenize=True, add_generation_prompt=True)
    assert ids == list(out["input_ids"])  # transformers' own ids of the same chat
    assert chat_prompt(CHAT, tok, add_generation_prompt=False) == raw.encode(
        _by_hand(generation=False), add_special_tokens=False).ids  # fmt: skip


def test_template_variables_reach_the_render_and_call_parameters_do_not(bpe):
    raw, tok = bpe
    full = raw.encode(_by_hand(), add_special_tokens=False).ids
    assert len(full) > 2
    # before: [the first 2 ids] (truncation reached the tokenizer call)
    cut = template_kwargs({"truncation": True, "max_length": 2, "return_dict": False})
    assert cut == {} and chat_prompt(CHAT, tok, template_kwargs=cut) == full
    off = template_kwargs({"enable_thinking": False, "max_length": 2})
    assert off == {"enable_thinking": False}
    assert chat_prompt(CHAT, tok, template_kwargs=off) == raw.encode(
        _by_hand(thinking=False), add_special_tokens=False).ids  # fmt: skip
    # a variable past the request's check still cannot reach the call's own parameters
    assert chat_prompt(CHAT, tok, template_kwargs={"padding": "max_length"}) == full
    with pytest.raises(InvalidRequestError, match="tokenize"):
        template_kwargs({"tokenize": True})


def test_a_template_error_through_transformers_is_a_400(bpe):
    _, tok = bpe
    bad = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer)
    bad.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(InvalidRequestError, match="roles must alternate"):
        chat_prompt(CHAT, bad)
