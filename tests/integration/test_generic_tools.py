"""Generic tool calling (issue #50) through the official `openai` client, on the default model,
whose chat template shows no tools: Pier lists the tools in a system message and the grammar
engine holds the answer to {"tool_calls": [...]} or {"response": "..."} (docs/api.md, Tool
calling). tool_choice required, named, auto and none, streamed and not: calls name an allowed
tool with arguments valid against its schema (checked with `jsonschema`, independent of Pier's
grammar), ids are call_ + 24 hex, a plain answer is never the raw wrapper, and the stream adds
up to the same answer; parallel_tool_calls false, a second turn after a call, a call cut by
max_tokens, the prompt's token count against the documented text, the per-model tool_format
key, and /v1/responses function tools. Template families: test_tool_calls.py."""

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass

import jsonschema
import openai
import pytest

from conftest import BASE_ARGS, PIER_BINARY, PIER_MODEL, PierServer, call, write_config

# The same two tools and question as test_tool_calls.py (the templates' families).
from test_tool_calls import ADD, ASK, SCHEMAS, TOOLS  # noqa: E402
NAMED_ADD = {"type": "function", "function": {"name": "add"}}
CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")
# The generic form's two wrappers: a response's text is always unwrapped, and a call cut short
# by max_tokens gives no content at all (finish_reason length, no calls).
WRAPPER = re.compile(r'^\s*\{\s*"(response|tool_calls)"')
# Enough for one call to either tool (about 30 tokens), small enough to keep the file fast.
CALL_TOKENS = 80
# Under auto the model may call several tools (compact JSON, but five calls to the weather
# question take well over CALL_TOKENS).
AUTO_TOKENS = 200


@dataclass
class Answer:
    content: str | None  # streamed: the content deltas joined ("" when there were none)
    calls: list  # [(id, name, arguments)]
    finish: str
    prompt_tokens: int | None = None


def whole(client, **kwargs):
    r = client.chat.completions.create(**kwargs)
    choice = r.choices[0]
    calls = [(c.id, c.function.name, c.function.arguments)
             for c in choice.message.tool_calls or []]
    assert all(c.type == "function" for c in choice.message.tool_calls or [])
    return Answer(choice.message.content, calls, choice.finish_reason, r.usage.prompt_tokens)


def streamed(client, **kwargs):
    chunks = [c for c in client.chat.completions.create(stream=True, **kwargs) if c.choices]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = {}
    for c in chunks:
        for d in c.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(d.index, ["", "", ""])
            entry[0] += d.id or ""
            entry[1] += (d.function and d.function.name) or ""
            entry[2] += (d.function and d.function.arguments) or ""
    finishes = [c.choices[0].finish_reason for c in chunks]
    assert all(f is None for f in finishes[:-1]), finishes
    return Answer(content, [tuple(calls[i]) for i in sorted(calls)], finishes[-1])


def check(answer, allowed):
    """A call answer (valid calls to `allowed` tools, no content) or a plain one: a response's
    text, unwrapped, or (finish_reason length) a call cut short, which gives no calls and no
    content."""
    if answer.calls:
        assert answer.finish == "tool_calls", answer
        assert not answer.content, answer
        for call_id, name, arguments in answer.calls:
            assert CALL_ID.match(call_id), answer
            assert name in allowed, answer
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        assert len({c[0] for c in answer.calls}) == len(answer.calls), answer
    else:
        assert answer.finish in ("stop", "length"), answer
        assert isinstance(answer.content, str), answer
        assert answer.content or answer.finish == "length", answer
        assert not WRAPPER.match(answer.content), answer


def same_answer(a, b):
    """Streamed and whole answers to the same greedy request: the same text or the same calls
    (ids are new for each request)."""
    assert [c[1:] for c in a.calls] == [c[1:] for c in b.calls], (a, b)
    assert (a.content or "") == (b.content or ""), (a, b)
    assert a.finish == b.finish, (a, b)


@pytest.mark.parametrize("choice", ["required", NAMED_ADD], ids=["required", "named"])
def test_required_and_named_choices_give_one_valid_call(client, server, choice):
    kwargs = dict(model=server.model_id, messages=ASK, tools=TOOLS, tool_choice=choice,
                  temperature=0, seed=1, max_tokens=CALL_TOKENS)
    allowed = {"add"} if isinstance(choice, dict) else set(SCHEMAS)
    a = whole(client, **kwargs)
    assert len(a.calls) == 1 and a.content is None, a
    check(a, allowed)
    s = streamed(client, **kwargs)
    assert len(s.calls) == 1, s
    check(s, allowed)
    same_answer(a, s)


def test_none_answers_in_plain_content_with_the_prompt_of_no_tools(client, server):
    kwargs = dict(model=server.model_id, messages=ASK, temperature=0, max_tokens=12)
    a = whole(client, tools=TOOLS, tool_choice="none", **kwargs)
    assert not a.calls
    check(a, set())
    assert a.prompt_tokens == whole(client, **kwargs).prompt_tokens
    s = streamed(client, tools=TOOLS, tool_choice="none", **kwargs)
    same_answer(a, s)


@pytest.mark.parametrize("messages", [
    ASK,
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Hi! Tell me a joke about cats."}],
], ids=["weather", "joke"])
def test_auto_answers_a_call_or_plain_content(client, server, messages):
    kwargs = dict(model=server.model_id, messages=messages, tools=TOOLS, temperature=0, seed=1,
                  max_tokens=AUTO_TOKENS)
    a = whole(client, **kwargs)
    check(a, set(SCHEMAS))
    s = streamed(client, **kwargs)
    check(s, set(SCHEMAS))
    same_answer(a, s)


def test_auto_sampled_answers_are_always_one_of_the_two_shapes(client, server):
    for seed in range(3):
        a = whole(client, model=server.model_id, messages=ASK, tools=TOOLS, tool_choice="auto",
                  temperature=1.0, seed=seed, max_tokens=AUTO_TOKENS)
        check(a, set(SCHEMAS))


def test_parallel_tool_calls_false_makes_at_most_one_call(client, server):
    # Greedy, with parallel calls allowed, the model answers ASK with five calls.
    kwargs = dict(model=server.model_id, messages=ASK, tools=TOOLS, parallel_tool_calls=False,
                  max_tokens=CALL_TOKENS)
    answers = [whole(client, temperature=0, **kwargs), streamed(client, temperature=0, **kwargs)]
    answers += [whole(client, temperature=1.0, seed=seed, **kwargs) for seed in range(2)]
    for a in answers:
        assert len(a.calls) <= 1, a
        check(a, set(SCHEMAS))


def test_a_call_and_its_result_go_back_for_a_second_turn(client, server):
    first = whole(client, model=server.model_id, messages=ASK, tools=TOOLS,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}},
                  temperature=0, max_tokens=CALL_TOKENS)
    ((call_id, name, arguments),) = first.calls
    history = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id,
         "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    second = whole(client, model=server.model_id, messages=history, tools=TOOLS, temperature=0,
                   max_tokens=AUTO_TOKENS)
    check(second, set(SCHEMAS))
    assert second.prompt_tokens > first.prompt_tokens + 20  # the call and its result are shown


def test_a_call_cut_by_max_tokens_is_length_without_calls(client, server):
    kwargs = dict(model=server.model_id, messages=ASK, tools=TOOLS, tool_choice="required",
                  temperature=0, max_tokens=5)
    for a in (whole(client, **kwargs), streamed(client, **kwargs)):
        assert a.finish == "length", a
        assert not a.calls, a
        assert not a.content, a
        check(a, set(SCHEMAS))


# The prompt: the default model's ChatML template over the documented generic form, compared
# by token count with /tokenize of the expected text (the template's own default system
# message is gone because the tools' system message comes first).
TOOL_INTRO = ("You can call these tools. Each is a JSON object with its name, description and "
              "the JSON Schema of its arguments:")
CALL_LINES = ["To call tools, answer with only this JSON object:",
              '{"tool_calls": [{"name": "<tool name>", "arguments": {<its arguments>}}]}']
RESPONSE_LINES = ["To answer without a tool, answer with only this JSON object:",
                  '{"response": "<your answer>"}']


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def tool_text(tools, auto):
    lines = [TOOL_INTRO] + [compact(t["function"]) for t in tools] + [""] + CALL_LINES
    return "\n".join(lines + (RESPONSE_LINES if auto else []))


def chatml(messages):
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def token_count(server, text):
    status, body = call(server, "POST", "/tokenize", {"content": text})
    assert status == 200, body
    return len(body["tokens"])


def test_the_prompt_is_the_documented_generic_form(client, server):
    def prompt_tokens(messages, **kwargs):
        return whole(client, model=server.model_id, messages=messages, tools=TOOLS,
                     temperature=0, max_tokens=1, **kwargs).prompt_tokens

    # No system message: one is inserted; under required, without the response lines; a named
    # function is the only tool listed.
    expected = chatml([{"role": "system", "content": tool_text(TOOLS, auto=False)}] + ASK)
    assert prompt_tokens(ASK, tool_choice="required") == token_count(server, expected)
    expected = chatml([{"role": "system", "content": tool_text([ADD], auto=False)}] + ASK)
    assert prompt_tokens(ASK, tool_choice=NAMED_ADD) == token_count(server, expected)
    # A system message: the tool text follows its content after a blank line.
    system = {"role": "system", "content": "You are terse."}
    expected = chatml([{"role": "system",
                        "content": system["content"] + "\n\n" + tool_text(TOOLS, auto=True)}]
                      + ASK)
    assert prompt_tokens([system] + ASK) == token_count(server, expected)
    # A call in the history is the assistant's JSON; the tool results, one user message.
    arguments = {"city": "Paris", "unit": "celsius"}
    result = json.dumps({"temperature": 21})
    history = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_" + "0" * 24, "type": "function",
                         "function": {"name": "get_weather",
                                      "arguments": json.dumps(arguments)}}]},
        {"role": "tool", "tool_call_id": "call_" + "0" * 24, "content": result},
    ]
    expected = chatml([
        {"role": "system", "content": tool_text(TOOLS, auto=True)}, ASK[0],
        {"role": "assistant",
         "content": compact({"tool_calls": [{"name": "get_weather", "arguments": arguments}]})},
        {"role": "user",
         "content": compact({"tool_results": [{"tool_call_id": "call_" + "0" * 24,
                                               "name": "get_weather", "content": result}]})},
    ])
    assert prompt_tokens(history) == token_count(server, expected)


def test_parameters_the_grammar_cannot_enforce_are_refused_under_auto_too(client, server):
    # The grammar holds every answer of the generic form, so `oneOf` is refused under auto as
    # under required (a template's family accepts it under auto).
    one_of = {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object",
                                    "properties": {"x": {"oneOf": [{"type": "string"},
                                                                   {"type": "integer"}]}}}}}
    for choice in ("auto", "required"):
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model=server.model_id, messages=ASK, tools=[one_of],
                                           tool_choice=choice, max_tokens=4)
        body = raised.value.body
        assert body["param"] == "tools", body
        assert "a tool's parameters cannot be enforced" in body["message"], body
        assert "oneOf" in body["message"], body
        assert "/properties/arguments/properties/x" in body["message"], body


def test_function_tools_through_the_responses_api(client, server):
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    kwargs = dict(model=server.model_id, input="What is the weather in Paris?", tools=tools,
                  tool_choice="required", temperature=0, max_output_tokens=CALL_TOKENS)
    r = client.responses.create(**kwargs)
    assert r.status == "completed", r
    (item,) = r.output
    assert item.type == "function_call", r
    assert item.name in SCHEMAS and CALL_ID.match(item.call_id), item
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])
    events = list(client.responses.create(stream=True, **kwargs))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.name, i.arguments) for i in done] == \
        [("function_call", item.name, item.arguments)]


# The per-model key tool_format: the default GGUF under three names.
FORMATS = ("off", "generic", "template")


@pytest.fixture(scope="module")
def formats():
    entries = "".join(f"""
  - name: tools-{f}
    path: {PIER_MODEL}
    ctx: 1024
    tool_format: {f}""" for f in FORMATS)
    config = write_config(tempfile.mkdtemp(prefix="pier-tool-format-"), f"models:{entries}\n")
    s = PierServer(["--config", config], with_model=False)
    yield openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                        timeout=120)
    s.stop_and_check()


def refused(client, **kwargs):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(messages=ASK, tools=TOOLS, max_tokens=4, **kwargs)
    return raised.value.body


def test_tool_format_off_refuses_tools(formats):
    for choice in ("auto", "required", NAMED_ADD):
        error = refused(formats, model="tools-off", tool_choice=choice)
        assert error["param"] == "tools", error
        assert "tools-off" in error["message"], error
    ok = whole(formats, model="tools-off", messages=ASK, tools=TOOLS, tool_choice="none",
               max_tokens=4)
    assert not ok.calls


def test_tool_format_template_refuses_a_template_without_tools(formats):
    error = refused(formats, model="tools-template", tool_choice="required")
    assert error["param"] == "tools" and "tools-template" in error["message"], error
    assert "does not support tools" in error["message"], error


def test_tool_format_generic_calls(formats):
    a = whole(formats, model="tools-generic", messages=ASK, tools=TOOLS, tool_choice=NAMED_ADD,
              temperature=0, max_tokens=CALL_TOKENS)
    assert len(a.calls) == 1, a
    check(a, {"add"})


def test_an_unknown_tool_format_stops_the_server_naming_the_key():
    config = write_config(tempfile.mkdtemp(prefix="pier-tool-format-"),
                          f"models:\n  - name: bad\n    path: {PIER_MODEL}\n"
                          f"    tool_format: sometimes\n")
    done = subprocess.run([PIER_BINARY, "serve", "--config", config] + BASE_ARGS,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done
    assert "tool_format" in done.stderr and "sometimes" in done.stderr, done.stderr
