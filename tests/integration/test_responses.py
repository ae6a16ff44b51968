"""The Responses API (POST /v1/responses) through the official `openai` client: the same
tokens as chat completions for the same conversation, typed streaming events whose deltas add
up to the final response, structured output through text.format, the length limit as status
incomplete, and what Pier cannot do refused by name. (Function tools through this API:
test_tool_calls.py, which has models whose templates show tools.)"""

import json

import jsonschema
import openai
import pytest


def test_a_response_has_the_tokens_of_the_same_chat(client, server):
    r = client.responses.create(model=server.model_id, instructions="Be brief.",
                                input="Name a color.", temperature=0, max_output_tokens=16)
    chat = client.chat.completions.create(
        model=server.model_id, temperature=0, max_tokens=16,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Name a color."}])
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.status == ("incomplete" if chat.choices[0].finish_reason == "length" else "completed")
    assert r.instructions == "Be brief." and r.max_output_tokens == 16
    message = r.output[0]
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text"


def test_the_length_limit_is_status_incomplete(client, server):
    r = client.responses.create(model=server.model_id, input="Count from one to fifty.",
                                temperature=0, max_output_tokens=4)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 4


def test_streamed_events_add_up_to_the_response(client, server):
    kwargs = dict(model=server.model_id, input=[{"role": "user", "content": "Say hello."}],
                  temperature=0, max_output_tokens=12)
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done",
                          "response.completed" if whole.status == "completed"
                          else "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_text_format_json_schema_is_enforced(client, server):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 12},
                             "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.responses.create(model=server.model_id, input="A person as JSON.", temperature=0,
                                max_output_tokens=200,
                                text={"format": {"type": "json_schema", "name": "person",
                                                 "schema": schema, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)


@pytest.mark.parametrize("extra, param, words", [
    ({"input": [{"type": "input_image", "image_url": "http://x/y.png"}]}, "input", "input_image"),
    ({"input": "x", "previous_response_id": "resp_123"}, "previous_response_id",
     "whole conversation"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools", "web_search"),
    ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "1"}]}, "input",
     "c9"),
])
def test_what_pier_cannot_do_is_refused_by_name(client, server, extra, param, words):
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=server.model_id, max_output_tokens=4, **extra)
    error = raised.value.body
    assert error["param"] == param, error
    assert words in error["message"], error


SCHEMA_FORMAT = {"type": "json_schema", "name": "s"}


@pytest.mark.parametrize("extra, param, words", [
    ({"input": [{"role": "user", "content": "Hi"},
                {"type": "function_call_output", "call_id": "c9", "output": "1"}]},
     "input", 'input[1].call_id "c9" does not match the call_id of an earlier function_call'),
    ({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "[1]"}]},
     "input", "input[0].arguments must be a JSON object"),
    ({"input": "x", "max_output_tokens": 2**31}, "max_output_tokens",
     "max_output_tokens must be between 1 and"),
    ({"input": "x", "max_output_tokens": 10**6}, "max_output_tokens",
     "plus max_output_tokens (1000000) exceeds"),
    ({"input": "x", "text": {"format": dict(SCHEMA_FORMAT, schema=5)}}, "text",
     "text.format.schema must be an object"),
    ({"input": "x", "text": {"format": dict(SCHEMA_FORMAT, schema={"type": "integr"})}}, "text",
     "text.format: "),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}, "tools",
     "tools[0].name must be"),
])
def test_errors_name_the_fields_of_the_responses_body(client, server, extra, param, words):
    args = {"model": server.model_id, "max_output_tokens": 4}
    args.update(extra)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(**args)
    error = raised.value.body
    assert error["param"] == param, error
    assert words in error["message"], error
    for chat_name in ("messages", "tool_call_id", "max_completion_tokens", "response_format",
                      "json_schema", ".function."):
        assert chat_name not in error["message"], error
