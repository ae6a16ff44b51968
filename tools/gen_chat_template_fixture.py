#!/usr/bin/env python3
"""Generates tests/fixtures/chat_template/expected.json with HF transformers as the reference.

Every case is rendered with `PreTrainedTokenizerFast.apply_chat_template(..., tokenize=False)`,
the exact path a Python server takes, on a bare tokenizer (no special tokens of its own:
`bos_token` / `eos_token` are passed as keyword arguments, as Pier passes them from GGUF).
`strftime_now` is pinned to 2024-07-26 12:00:00 by replacing the `datetime` that transformers'
chat-template module calls, so Llama-3.2's "Today Date" is deterministic.

Three groups of cases:
  * template cases: real chat templates x fixture conversations. The SmolLM2 template is read
    from the GGUF model and stored in the fixture; vendor templates are referenced by file name
    and read by the C++ test from tests/fixtures/vendor/llama.cpp/templates/ (not committed).
  * snippets: small templates exercising one engine feature each, rendered by the same
    sandboxed environment transformers builds (`_compile_jinja_template`).
  * Errors are recorded as {"error": kind, "message": ...}; kind is "raise_exception" when the
    template called raise_exception (the C++ side must reproduce the message exactly), otherwise
    the Python exception class (the C++ side must fail, message free).

Usage: .venv/bin/python tools/gen_chat_template_fixture.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""

import argparse
import datetime as real_datetime
import json
import os
import sys

import gguf
import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENDOR = os.path.join(ROOT, "tests/fixtures/vendor/llama.cpp/templates")
OUT = os.path.join(ROOT, "tests/fixtures/chat_template/expected.json")

PINNED_NOW = real_datetime.datetime(2024, 7, 26, 12, 0, 0)
PINNED_UNIX_SECONDS = 1721995200  # 2024-07-26T12:00:00Z, what the C++ side pins its clock to


class PinnedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return PINNED_NOW


ctu.datetime = PinnedDatetime

TEMPLATES = {
    # name -> (bos_token, eos_token)
    "SmolLM2-135M-Instruct": ("<|im_start|>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("", "<|im_end|>"),
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "HuggingFaceTB-SmolLM3-3B.jinja": ("", "<|im_end|>"),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("", "<|end_of_text|>"),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

CONVERSATIONS = {
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello!"},
    ],
    "multi_turn": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
    "no_system": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "content_parts": [
        {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": " this."}]},
    ],
    "unicode": [
        {"role": "system", "content": "  Réponds en français. \n"},
        {"role": "user", "content": "\tHéllo wörld 👋 — 日本語 \"quoted\" 'single' \\ back\n\n"},
    ],
    "empty_content": [
        {"role": "user", "content": ""},
    ],
    "ends_with_assistant": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!"},
    ],
    "thinking": [
        {"role": "user", "content": "Think first."},
        {"role": "assistant", "content": "<think>\nLet me see.\n</think>\n\nDone."},
        {"role": "user", "content": "Again."},
    ],
    "system_only_roles_broken": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "tool_call": [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather in Zürich?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call12345",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21.5}"},
    ],
}

# (template, conversation, add_generation_prompt, extra kwargs)
PLAN = []
for name in TEMPLATES:
    for conv in [
        "system_user",
        "multi_turn",
        "no_system",
        "content_parts",
        "unicode",
        "empty_content",
        "ends_with_assistant",
        "thinking",
        "system_only_roles_broken",
    ]:
        for agp in (True, False):
            PLAN.append((name, conv, agp, {}))
    PLAN.append((name, "tool_call", True, {"tools": [WEATHER_TOOL]}))
PLAN += [
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "system_user", True, {"date_string": "01 Jan 2025"}),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "system_user", True,
     {"tools": [WEATHER_TOOL], "tools_in_user_message": False}),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "no_system", True, {"builtin_tools": ["brave_search", "code_interpreter"]}),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "system_user", True, {"date_string": "01 Jan 2025"}),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "system_user", True, {"enable_thinking": True}),
    ("Qwen-Qwen3-0.6B.jinja", "system_user", True, {"enable_thinking": False}),
]

# Every other vendor template, more lightly: generic special tokens, three conversations.
BROAD_BOS_EOS = ("<s>", "</s>")
BROAD_CASES = [("system_user", True, {}), ("multi_turn", False, {}), ("tool_call", True, {"tools": [WEATHER_TOOL]})]

# Small templates, one feature each: (template, context).
SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("a\n  {% if true %}\n  x\n  {% endif %}\nb", {}),
    ("a  {% if true %}x{% endif %}  b", {}),
    ("a\n  {%- if true -%}  x  {%- endif %}\nb", {}),
    ("a\n  {%+ if true %}x{% endif +%}\nb", {}),
    ("{{ 'x' }}\n{{- 'y' -}}\n\n  {{ 'z' }}\n", {}),
    ("line\n    {# comment #}\nnext\n", {}),
    ("{#- c -#}\n  a {#+ c +#}\n b", {}),
    ("x\r\ny\rz\n\n", {}),
    ("{% raw %}{{ not parsed }}{% endraw %}", {}),
    # literals and escapes
    ("{{ 'a\\nb\\t\\'c\\' \\x41\\u00e9\\U0001F600 \\d' }}", {}),
    ('{{ "dq \\"x\\"" ~ \'sq\' "adj" }}', {}),
    ("{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 3.5 }} {{ 1e3 }} {{ 2.0 }} {{ 1e-5 }} {{ 1.5e16 }} {{ 0.1 + 0.2 }}", {}),
    ("{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }}", {}),
    ("{{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"'] }}", {}),
    ("{{ (1, 2) }} {{ () }} {{ [] }} {{ {} }}", {}),
    # arithmetic
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 * 3 + 4 }} {{ 10 - 2 - 3 }}", {}),
    ("{{ 1 + 2.5 }} {{ 'ab' * 3 }} {{ [1] * 3 }} {{ [1, 2] + [3] }} {{ 'a' + 'b' }} {{ 1 ~ 2 ~ 'x' ~ none }}", {}),
    ("{{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ -3 ** 2 }} {{ 2 ** -1 }} {{ true + 1 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    # comparisons and logic
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ none == none }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 'z' not in 'abc' }} {{ not 1 }} {{ 1 and 'x' }} {{ 0 or '' }} {{ none or 'd' }}", {}),
    ("{{ 'yes' if x else 'no' }} {{ 'a' if none }}|{{ 1 if false else 2 if false else 3 }}", {"x": [0]}),
    ("{{ 1 < 'a' }}", {}),
    # attribute / subscript / slices
    ("{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5] }}|", {"m": {"role": "user", "content": "hi"}, "l": [1, 2, 3, 4]}),
    ("{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", {"s": "h€llo👋"}),
    ("{{ x.y.z }}", {}),
    ("{{ x.y }}", {"x": {}}),
    ("{{ x.y.z }}", {"x": {}}),
    ("{{ l.0 }} {{ l.1 }}", {"l": ["a", "b"]}),
    # undefined behaviour
    ("[{{ nope }}] {{ nope is defined }} {{ nope is undefined }} {{ nope|length }} {% for i in nope %}x{% endfor %}{% if not nope %}falsy{% endif %} {{ nope ~ 'x' }} {{ nope == none }}", {}),
    ("{{ nope + 1 }}", {}),
    ("{{ nope|tojson }}", {}),
    ("{{ 'x' in nope }}", {}),
    # loops
    ("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {"l": "abc"}),
    ("{% for x in l if x > 1 %}{{ x }}/{{ loop.length }}{% if loop.last %}!{% endif %} {% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {}),
    ("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('o', 'e') }} {% endfor %}", {"l": [1, 2, 3]}),
    ("{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}", {}),
    # scoping and namespace
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}{{ ns.s }}", {}),
    ("{% set ns = namespace() %}{% set ns.flag = true %}{{ ns.flag }}", {}),
    ("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [1, 2, 3]}),
    ("{% set x = 1 %}{% set x.y = 2 %}", {}),
    # tests
    ("{{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ [] is iterable }} {{ 1 is iterable }} {{ {} is iterable }}", {}),
    ("{{ 'a' is sequence }} {{ [] is sequence }} {{ {} is sequence }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 'x' is number }}", {}),
    ("{{ 1 is integer }} {{ 1.0 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }} {{ none is none }} {{ 0 is none }}", {}),
    ("{{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 2 is eq 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 'x' is in 'xy' }} {{ none is sameas none }}", {}),
    ("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ x is not defined }} {{ x is not none }}", {}),
    ("{{ raise_exception is callable }} {{ 'a' is callable }} {{ ns is defined }}", {}),
    # filters
    ("[{{ '  a b  '|trim }}] [{{ 'xxaxx'|trim('x') }}] {{ 'hello world'|upper }} {{ 'HeLLo'|lower }} {{ 'hello wORLD'|capitalize }} {{ 'hello wORLD-x y_z'|title }}", {}),
    ("{{ [1, 2, 3]|length }} {{ 'abc'|count }} {{ {'a': 1}|length }} {{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ 'abc'|last }}", {}),
    ("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }}", {}),
    ("{{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ 'abc'|join('-') }} {{ [{'n': 'x'}, {'n': 'y'}]|join(',', attribute='n') }}", {}),
    ("{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 42|string ~ 'x' }} {{ '42'|int + 1 }} {{ '4.7'|float }} {{ 'x'|int }} {{ 4.9|int }} {{ '12abc'|int(7) }}", {}),
    ("{{ 'ab'|list }} {{ {'a': 1}|list }} {{ {'a': 1, 'b': [2]}|items|list }} {{ [1, 2, 1, 3]|unique|list }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|reverse|list }} {{ 'abc'|reverse }}", {}),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|map(attribute='role')|join(',') }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}),
    ("{{ msgs|selectattr('tool_calls')|list|length }} {{ msgs|selectattr('tool_calls', 'defined')|list|length }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ['a', 'B']|map('upper')|list }} {{ [1, 0, 2]|select|list }}", {"msgs": [{"role": "user"}, {"role": "assistant", "tool_calls": [1]}, {"role": "assistant", "tool_calls": []}]}),
    ("{{ {'b': 1, 'a': [1, 2.5, 'é', none, true]}|tojson }} {{ 'x\"\\n\\u0001'|tojson }} {{ [1, {'a': {}}]|tojson(indent=2) }}", {}),
    ("{{ d|tojson }} {{ d|tojson(indent=4) }} {{ d|tojson(sort_keys=true) }} {{ [] |tojson(indent=2) }} {{ {}|tojson(indent=2) }}", {"d": {"z": 1, "a": {"x": [1, 2], "y": 1.0}}}),
    ("{{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 2.567|round(1, 'floor') }} {{ [1, 2, 3]|sum }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }}", {}),
    ("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'x'|safe }}", {}),
    ("{{ {'b': 1, 'a': 2}|dictsort }} {{ 'one two  three'|wordcount }} {{ 'abc'|center(7) }}|", {}),
    ("{{ [[1, 2], [3]]|map('length')|list }} {{ 'a,b'.split(',')|map('trim')|list }}", {}),
    # methods
    ("[{{ '  x  '.strip() }}] [{{ '  x  '.lstrip() }}] [{{ '  x  '.rstrip() }}] [{{ 'xxaxx'.strip('x') }}] {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}", {}),
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ 'aXa'.replace('a', 'b') }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }} {{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abcb'.count('b') }}", {}),
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {"d": {"a": 1, "b": 2}}),
    ("{{ 'a</think>b'.split('</think>')[-1] }} {{ 'x'.join(['1', '2']) }} {{ '  '.isspace() }} {{ 'ab1'.isalnum() }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }}", {}),
    ("{{ 'a-b-c'.rsplit('-', 1) }} {{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'aBc'.swapcase() }} {{ 'x'.zfill(3) }}", {}),
    ("{{ [1, 2, 3].index(2) }} {{ [1, 1, 2].count(1) }}", {}),
    ("{% set l = [1] %}{{ l.append(2) }}", {}),
    # globals
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M %A %B %j') }}", {}),
    ("{{ dict(a=1, b='x') }} {{ dict(a=1).a }} {{ namespace(a=1).a }}", {}),
    ("{{ range(100001)|length }}", {}),
    # macros
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', '?') }} {{ greet(name='Z', punct='.') }}", {}),
    ("{% macro outer(x) %}{% if x > 0 %}{{ x }}{{ outer(x - 1) }}{% endif %}{% endmacro %}{{ outer(3) }}", {}),
    ("{% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", {}),
    # filter block and generation tag
    ("{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # string conversion of values
    ("{{ [none, true, 1.0, 'a', {'x': none}] }} {{ {'a': [1]} ~ '' }} {{ 10000000000000000.0 }} {{ 1e100 }} {{ 0.0001 }} {{ -0.0 }} {{ 123456789012345678 }}", {}),
    ("{{ m }} {{ m.content }}", {"m": {"role": "user", "content": [{"type": "text", "text": "hi"}], "n": 1.5, "b": True, "z": None}}),
    ("{{ messages[0]['content'] | trim }}", {"messages": [{"content": [{"type": "text", "text": "x"}]}]}),
    ("{{ 'a' ~ 1.0 ~ true ~ [1] }}", {}),
    # markup (|safe, |escape) and generators (select/map results)
    ("{{ 'a<'|safe + '<b>' }} {{ '<'|e }} {{ '<'|e + '&' }} {{ 'x' + '\"'|safe }} {{ ('a'|safe) ~ '<' }}", {}),
    ("{{ [1, 2]|select('odd') is iterable }} {{ [1, 2]|select('odd') is sequence }} {% if [] | select %}truthy{% endif %} {{ none|selectattr('x')|list }} {{ ''|map('upper')|list }}", {}),
    ("{{ [1, 2]|map('string')|length }}", {}),
    ("{{ [1, 2]|map('string')|tojson }}", {}),
    ("{{ ([1, 2]|select('odd'))[0] }}|", {}),
    ("{{ {0: 'a', 512: 'b'}[512] }} {{ {0: 'a', 1.5: 'b'} }} {{ {0: 'a'}|tojson }} {% for k, v in {2: 'x', 1: 'y'}|dictsort %}{{ k + 1 }}{{ v }}{% endfor %} {{ 0 in {0: 1} }}", {}),
    # errors that must surface
    ("{{ [1, 2][5] }}x", {}),
    ("{{ {'a': 1}['b'] }}x", {}),
    ("{{ 'abc'['x'] }}", {}),
    ("{{ 5 is divisibleby 0 }}", {}),
]


def make_tokenizer():
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")))


def render_case(tok, source, messages, add_generation_prompt, kwargs):
    try:
        out = tok.apply_chat_template(
            messages,
            chat_template=source,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return {"expected": out}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # what raise_exception raises
            return {"error": "raise_exception", "message": str(e)}
        return {"error": type(e).__name__, "message": str(e)}
    except Exception as e:  # TypeError, ValueError, ... from inside the template
        return {"error": type(e).__name__, "message": str(e)}


def render_snippet(source, context):
    try:
        template = ctu._compile_jinja_template(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": "TemplateSyntaxError", "message": str(e)}
    try:
        return {"expected": template.render(**context)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": "raise_exception", "message": str(e)}
        return {"error": type(e).__name__, "message": str(e)}
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}


def read_smollm2_template(model_path):
    reader = gguf.GGUFReader(model_path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()

    sources = {"SmolLM2-135M-Instruct": read_smollm2_template(args.model)}
    for name in TEMPLATES:
        if name.endswith(".jinja"):
            with open(os.path.join(VENDOR, name), encoding="utf-8") as f:
                sources[name] = f.read()

    plan = list(PLAN)
    bos_eos = dict(TEMPLATES)
    for name in sorted(os.listdir(VENDOR)):
        if name.endswith(".jinja") and name not in TEMPLATES:
            with open(os.path.join(VENDOR, name), encoding="utf-8") as f:
                sources[name] = f.read()
            bos_eos[name] = BROAD_BOS_EOS
            plan += [(name, conv, agp, extra) for conv, agp, extra in BROAD_CASES]

    tok = make_tokenizer()
    cases = []
    for name, conv, agp, extra in plan:
        bos, eos = bos_eos[name]
        kwargs = {"bos_token": bos, "eos_token": eos, **extra}
        result = render_case(tok, sources[name], CONVERSATIONS[conv], agp, kwargs)
        cases.append({"template": name, "conversation": conv, "add_generation_prompt": agp,
                      "kwargs": kwargs, **result})

    snippets = []
    for source, context in SNIPPETS:
        snippets.append({"template": source, "context": context, **render_snippet(source, context)})

    fixture = {
        "generator": "tools/gen_chat_template_fixture.py",
        "transformers_version": transformers.__version__,
        "jinja2_version": jinja2.__version__,
        "pinned_unix_seconds": PINNED_UNIX_SECONDS,
        "inline_templates": {"SmolLM2-135M-Instruct": sources["SmolLM2-135M-Instruct"]},
        "conversations": CONVERSATIONS,
        "cases": cases,
        "snippets": snippets,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"wrote {OUT}: {len(cases)} template cases ({n_err} errors), {len(snippets)} snippets", file=sys.stderr)


if __name__ == "__main__":
    main()
