"""The reference renderer: Python Jinja2 configured the way Hugging Face transformers
configures it for chat templates (transformers/utils/chat_template_utils.py,
_compile_jinja_template), with the request context vLLM builds.

Run with /usr/bin/python3 (Debian's python3-jinja2).
"""

import datetime
import json
import os

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedError(jinja2.exceptions.TemplateError):
    """raise_exception(message) from a template."""


class GenerationBlocks(Extension):
    """{% generation %}...{% endgeneration %}: transformers registers an extension for this
    tag (to track assistant spans); for rendering it outputs its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise RaisedError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, GenerationBlocks])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class ChatRenderer:
    """Loads a model folder like infera::chat::ChatTemplate::Load."""

    def __init__(self, model_dir, now):
        self.env = make_environment(now)
        config_path = os.path.join(model_dir, "tokenizer_config.json")
        config = {}
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        self.special_tokens = {}
        for key, value in config.items():
            if not key.endswith("_token"):
                continue
            if isinstance(value, str):
                self.special_tokens[key] = value
            elif isinstance(value, dict) and isinstance(value.get("content"), str):
                self.special_tokens[key] = value["content"]
        self.placeholders = placeholders_of(config)
        self.templates = {}
        jinja_path = os.path.join(model_dir, "chat_template.jinja")
        self.openai_format = {}
        if os.path.exists(jinja_path):
            with open(jinja_path, encoding="utf-8") as f:
                self._add("default", f.read())
            return
        source = config.get("chat_template")
        if isinstance(source, str):
            self._add("default", source)
        else:
            for entry in source:
                if entry["name"] in ("default", "tool_use"):
                    self._add(entry["name"], entry["template"])

    def _add(self, name, source):
        self.templates[name] = self.env.from_string(source)
        self.openai_format[name] = iterates_content(self.env.parse(source))

    def render(self, body):
        tools = body.get("tools")
        name = "tool_use" if tools is not None and "tool_use" in self.templates else "default"
        template = self.templates[name]
        context = dict(self.special_tokens)
        messages = body["messages"]
        if not self.openai_format[name]:
            messages = [join_text_parts(m, self.placeholders) for m in messages]
        context["messages"] = messages
        context["tools"] = tools
        context["documents"] = body.get("documents")
        context["add_generation_prompt"] = body.get("add_generation_prompt", True)
        context.update(body.get("chat_template_kwargs") or {})
        return template.render(**context)


def iterates_content(ast):
    """vLLM's content-format detection: "openai" when a for loop iterates over
    <name>.content or <name>['content'], else "string"."""
    for loop in ast.find_all(nodes.For):
        it = loop.iter
        if isinstance(it, nodes.Getattr) and it.attr == "content" and isinstance(it.node, nodes.Name):
            return True
        if (isinstance(it, nodes.Getitem) and isinstance(it.arg, nodes.Const)
                and it.arg.value == "content" and isinstance(it.node, nodes.Name)):
            return True
    return False


MEDIA_KINDS = {"image_url": "image", "image": "image", "input_audio": "audio", "audio": "audio",
               "audio_url": "audio", "video_url": "video", "video": "video"}


def placeholders_of(config):
    """The placeholder per medium a "string"-format template sees (vLLM's
    get_placeholder_str): Qwen-VL's when the tokenizer's added tokens hold them (every
    Qwen 2.5 / 3 tokenizer does), else generic ones."""
    tokens = {t.get("content") for t in (config.get("added_tokens_decoder") or {}).values()
              if isinstance(t, dict)}
    out = {"image": "<image>", "audio": "<audio>", "video": "<video>"}
    if "<|vision_start|>" in tokens and "<|vision_end|>" in tokens:
        if "<|image_pad|>" in tokens:
            out["image"] = "<|vision_start|><|image_pad|><|vision_end|>"
        if "<|video_pad|>" in tokens:
            out["video"] = "<|vision_start|><|video_pad|><|vision_end|>"
    if {"<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"} <= tokens:
        out["audio"] = "<|audio_bos|><|AUDIO|><|audio_eos|>"
    return out


def join_text_parts(message, placeholders):
    """A "string"-format template gets a content list as one string, as vLLM builds it
    (chat_utils._get_full_multimodal_text_prompt): the text parts joined with a newline,
    and for each medium the placeholders the text does not already hold, first, one per
    line, in order of first appearance. A list holding anything else is unchanged."""
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if not isinstance(content, list) or not content:
        return message
    texts = []
    counts = {}  # placeholder -> parts, insertion-ordered
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return message
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                return message
            texts.append(part["text"])
            continue
        kind = MEDIA_KINDS.get(part["type"])
        if kind is None:
            return message
        placeholder = placeholders[kind]
        counts[placeholder] = counts.get(placeholder, 0) + 1
    text = "\n".join(texts)
    missing = []
    for placeholder, count in counts.items():
        missing.extend([placeholder] * max(0, count - text.count(placeholder)))
    return dict(message, content="\n".join(missing + [text]))


def parse_now(text):
    return datetime.datetime.fromisoformat(text)
