"""The content format a chat template is given a message's content in: vLLM's
--chat-template-content-format (`CONTENT_FORMATS`).

Contract: this module owns the choice of format: "string", the texts joined with "\\n" (as
vLLM and TensorRT-LLM join them; hunt 68: "Question:" + "What is 2+2?" ran together), or
"openai", a list of {"type": "text", "text": ...} parts (a string is one part). "auto" (the
default) is vLLM's detection (`detect_content_format`): "openai" for a template that loops
over a message's content, as many HF templates do (hunt 68: they were given a string, looped
over its characters and rendered every message empty), else "string"; `resolved_format`
gives the format a chat is rendered in ("string" without a Jinja template).
"""

from __future__ import annotations

import functools
from typing import Any

from wse_inference.serve.template_sandbox import compile_chat_template

__all__ = ["CONTENT_FORMATS", "detect_content_format", "resolved_format"]

CONTENT_FORMATS = ("auto", "string", "openai")  # vLLM's --chat-template-content-format


def _reads(node: Any, names: set[str], key: str | None = None) -> bool:
    """Whether Jinja `node` reads a variable among `names` (with `key`: its item or attribute
    `key`, x['content'] or x.content), through filters, tests and slices (vLLM's
    `_is_var_or_elems_access`)."""
    from jinja2 import nodes

    while isinstance(node, (nodes.Filter, nodes.Test)) or (
        isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice)
    ):
        node = node.node
    if key is not None:
        item = isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and (
            node.arg.value == key)  # fmt: skip
        if not (item or (isinstance(node, nodes.Getattr) and node.attr == key)):
            return False
        node = node.node
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name in names


def _loop_targets(ast: Any, names: set[str], key: str | None = None) -> set[str]:
    """The names `{% for x in ... %}` binds over what `_reads(names, key)`."""
    from jinja2 import nodes

    return {loop.target.name for loop in ast.find_all(nodes.For)
            if isinstance(loop.target, nodes.Name) and _reads(loop.iter, names, key)}  # fmt: skip


@functools.lru_cache(maxsize=32)
def detect_content_format(template: str) -> str:
    """vLLM's "auto" content format of a Jinja chat template: "openai" when it loops over a
    message's content (`{% for m in messages %}...{% for c in m['content'] %}`, `messages`
    also through `{% set %}` aliases and slices), else "string" (a template that does not
    compile too: its error is said where it is rendered)."""
    import jinja2
    from jinja2 import nodes

    try:
        ast = compile_chat_template(template).environment.parse(template)
    except jinja2.TemplateError:
        return "string"
    messages, grown = {"messages"}, True
    while grown:  # {% set loop_messages = messages[1:] %}, and aliases of those
        found = {a.target.name for a in ast.find_all(nodes.Assign)
                 if isinstance(a.target, nodes.Name) and _reads(a.node, messages)}  # fmt: skip
        grown = not found <= messages
        messages |= found
    looped = _loop_targets(ast, _loop_targets(ast, messages), "content")
    return "openai" if looped else "string"


def resolved_format(content_format: str, template: str | None) -> str:
    """`content_format`, "auto" detected from the Jinja `template`; without one, "string"
    (the plain "role: content" lines print a content as it is)."""
    if content_format not in CONTENT_FORMATS:
        raise ValueError(f"content_format must be one of {CONTENT_FORMATS}, got {content_format!r}")
    if template is None:
        return "string"
    return detect_content_format(template) if content_format == "auto" else content_format
