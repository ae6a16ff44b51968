"""Tool calling through the official `openai` client. The default model's own template shows
no tools, so three models serve the same GGUF with the chat templates of three families
(`chat_template` in models.yaml: Qwen 2.5's Hermes-style <tool_call>, Llama 3.1's JSON and
Mistral Nemo's [TOOL_CALLS]; the files come from llama-cpp-python's vendored copies, placed by
scripts/bootstrap). tool_choice required and named are enforced by constrained decoding, so even
a 135M model's calls must name an allowed function with arguments valid against its schema
(checked with `jsonschema`); streamed calls equal the non-streamed ones; the call and its
result go back into the next turn; bad tool input is a 400 naming what is wrong."""

import json
import os
import tempfile

import jsonschema
import openai
import pytest

from conftest import PIER_MODEL, PierServer, write_config

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "..", "fixtures", "vendor", "llama.cpp", "templates")
FAMILIES = {
    "qwen": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 40},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two integers.",
    "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                  "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
                   "required": ["a", "b"], "additionalProperties": False}}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tool_server():
    for name in FAMILIES.values():
        assert os.path.isfile(os.path.join(TEMPLATES, name)), f"{name}: run scripts/bootstrap"
    entries = "\n".join(
        f"  - {{name: {family}, path: {PIER_MODEL}, ctx: 2048, "
        f"chat_template: {os.path.join(TEMPLATES, name)}}}" for family, name in FAMILIES.items())
    config = write_config(tempfile.mkdtemp(prefix="pier-tools-"),
                          f"models:\n{entries}\n  - {{name: plain, path: {PIER_MODEL}, ctx: 2048, "
                          f"tool_format: template}}\n")
    s = PierServer(["--config", config], with_model=False)
    yield s
    s.stop_and_check()


@pytest.fixture(scope="module")
def tc(tool_server):
    return openai.OpenAI(base_url=tool_server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def check_calls(message, allowed):
    assert message.tool_calls, message
    for call in message.tool_calls:
        assert call.type == "function"
        assert call.function.name in allowed, call
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({call.id for call in message.tool_calls}) == len(message.tool_calls)


@pytest.mark.parametrize("family", FAMILIES)
def test_required_and_named_choices_are_enforced(tc, family):
    r = tc.chat.completions.create(model=family, messages=ASK, tools=TOOLS,
                                   tool_choice="required", temperature=0, max_tokens=120)
    assert r.choices[0].finish_reason == "tool_calls"
    check_calls(r.choices[0].message, {"get_weather", "add"})
    for seed in range(3):
        r = tc.chat.completions.create(
            model=family, messages=ASK, tools=TOOLS, temperature=1.0, seed=seed, max_tokens=120,
            tool_choice={"type": "function", "function": {"name": "add"}})
        assert r.choices[0].finish_reason == "tool_calls"
        check_calls(r.choices[0].message, {"add"})
        assert r.choices[0].message.content is None


# Parameters with $defs and $ref; both tools define "s", as different types. Each reference
# must resolve within its own tool's parameters, wherever the forced call's grammar embeds them.
REF_TOOLS = [
    {"type": "function", "function": {
        "name": "book", "description": "Books a table.",
        "parameters": {"type": "object",
                       "properties": {"guest": {"$ref": "#/$defs/s"},
                                      "when": {"$ref": "#/$defs/slot"}},
                       "required": ["guest", "when"], "additionalProperties": False,
                       "$defs": {"s": {"type": "string", "maxLength": 12},
                                 "slot": {"enum": ["lunch", "dinner"]}}}}},
    {"type": "function", "function": {
        "name": "count", "description": "Counts people.",
        "parameters": {"type": "object",
                       "properties": {"n": {"$ref": "#/$defs/s"}},
                       "required": ["n"], "additionalProperties": False,
                       "$defs": {"s": {"type": "integer", "minimum": 0, "maximum": 99}}}}},
]
REF_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in REF_TOOLS}


@pytest.mark.parametrize("family", FAMILIES)
def test_parameters_with_defs_and_refs_are_enforced(tc, family):
    ask = [{"role": "user", "content": "Book a table for Ann at dinner."}]
    choices = ["required"] + [{"type": "function", "function": {"name": name}}
                              for name in REF_SCHEMAS]
    for choice in choices:
        r = tc.chat.completions.create(model=family, messages=ask, tools=REF_TOOLS,
                                       tool_choice=choice, temperature=0, max_tokens=120)
        assert r.choices[0].finish_reason == "tool_calls", (choice, r)
        (call,) = r.choices[0].message.tool_calls
        if isinstance(choice, dict):
            assert call.function.name == choice["function"]["name"]
        jsonschema.validate(json.loads(call.function.arguments), REF_SCHEMAS[call.function.name])
    # The same schema as response_format, as before.
    r = tc.chat.completions.create(
        model=family, messages=ask, temperature=0, max_tokens=120,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "book", "schema": REF_SCHEMAS["book"]}})
    jsonschema.validate(json.loads(r.choices[0].message.content), REF_SCHEMAS["book"])


@pytest.mark.parametrize("family", FAMILIES)
def test_streamed_calls_equal_the_whole_answer(tc, family):
    kwargs = dict(model=family, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                  max_tokens=120)
    whole = tc.chat.completions.create(**kwargs).choices[0].message.tool_calls
    chunks = list(tc.chat.completions.create(stream=True, **kwargs))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name, d.function.arguments) for d in deltas] == \
        [(i, c.function.name, c.function.arguments) for i, c in enumerate(whole)]
    assert all(d.id and d.type == "function" for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_call_and_its_result_go_back_into_the_next_turn(tc, family):
    first = tc.chat.completions.create(model=family, messages=ASK, tools=TOOLS,
                                       tool_choice={"type": "function",
                                                    "function": {"name": "get_weather"}},
                                       temperature=0, max_tokens=120)
    call = first.choices[0].message.tool_calls[0]
    if family == "mistral":  # its template insists on 9 alphanumerics
        assert len(call.id) == 9 and call.id.isalnum()
    history = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name,
                                      "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})},
    ]
    r = tc.chat.completions.create(model=family, messages=history, tools=TOOLS,
                                   tool_choice="none", temperature=0, max_tokens=20)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].message.tool_calls is None
    # The call and its result are in the prompt: longer than the question alone, rendered alike.
    alone = tc.chat.completions.create(model=family, messages=ASK, tools=TOOLS,
                                       tool_choice="none", temperature=0, max_tokens=1)
    assert r.usage.prompt_tokens > alone.usage.prompt_tokens + 10


def test_auto_answers_in_text_when_the_model_calls_nothing(tc):
    r = tc.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "Hi!"}],
                                   tools=TOOLS, temperature=0, max_tokens=16)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert choice.message.tool_calls is None and choice.message.content


def test_tool_errors_are_400s_that_say_what_is_wrong(tc):
    def refused(**kwargs):
        with pytest.raises(openai.BadRequestError) as raised:
            tc.chat.completions.create(max_tokens=4, **kwargs)
        return raised.value.body

    # `plain` is the default template under tool_format: template, which refuses tools where
    # the template does not show them (under auto it would take the generic form).
    error = refused(model="plain", messages=ASK, tools=TOOLS)
    assert error["param"] == "tools" and "plain" in error["message"]
    assert "does not support tools" in error["message"]
    # tool_choice none: the template never sees the tools, so any model may take them.
    ok = tc.chat.completions.create(model="plain", messages=ASK, tools=TOOLS, tool_choice="none",
                                    max_tokens=4)
    assert ok.choices[0].message.tool_calls is None
    error = refused(model="qwen", messages=ASK + [
        {"role": "tool", "tool_call_id": "call_nobody", "content": "1"}], tools=TOOLS)
    assert error["param"] == "messages" and "call_nobody" in error["message"]
    error = refused(model="qwen", messages=ASK, tools=TOOLS,
                    tool_choice={"type": "function", "function": {"name": "missing"}})
    assert error["param"] == "tool_choice" and "missing" in error["message"]
    bad_schema = {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"not": {}}}}}}
    error = refused(model="qwen", messages=ASK, tools=[bad_schema], tool_choice="required")
    assert error["param"] == "tools" and "not" in error["message"]
    error = refused(model="qwen", messages=ASK, tools=[{"type": "function",
                                                        "function": {"name": "bad name"}}])
    assert error["param"] == "tools"


def test_function_tools_through_the_responses_api(tc):
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    r = tc.responses.create(model="qwen", input="What is the weather in Paris?", tools=tools,
                            tool_choice={"type": "function", "name": "get_weather"},
                            temperature=0, max_output_tokens=120)
    assert r.status == "completed"
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), SCHEMAS["get_weather"])
    events = list(tc.responses.create(model="qwen", input="What is the weather in Paris?",
                                      tools=tools, tool_choice="required", temperature=0,
                                      max_output_tokens=120, stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.name, i.arguments) for i in done] == [(call.name, call.arguments)]
    # The call and its output go back as input items.
    follow = tc.responses.create(
        model="qwen", tools=tools, tool_choice="none", temperature=0, max_output_tokens=8,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temperature": 21})}])
    assert follow.output and follow.output[0].type == "message"
