"""Structured outputs (`response_format` json_object and json_schema) through the official
`openai` client: randomly generated schemas, every output parsed and validated with the
`jsonschema` package (an implementation independent of Pier's grammar engine); streaming equals
non-streaming; the completions route; schemas Pier cannot enforce are 400s naming the keyword;
a constrained request through a worker process (the IPC path).

PIER_SCHEMA_CASES sets how many generated schemas to run (CI: 24; `make bench` runs more)."""

import concurrent.futures
import json
import os
import random
import tempfile

import jsonschema
import openai
import pytest

from conftest import PIER_MODEL, PierServer, write_config

CASES = int(os.environ.get("PIER_SCHEMA_CASES", "24"))
MAX_TOKENS = 400
WORDS = ["red", "green", "blue", "alpha", "beta", "x", "Zoë", "naïve", "42", "a b"]


# ---- A random schema generator --------------------------------------------------------------
# Every generated schema bounds its output (string lengths, array sizes, no additional
# properties, depth <= 2), so a valid answer fits in MAX_TOKENS and the request must finish with
# "stop": an output cut at the length limit would not be a test of the grammar.

def gen_scalar(rng):
    kind = rng.choice(["string", "string", "pattern", "integer", "number", "boolean", "null",
                       "enum", "const"])
    if kind == "string":
        s = {"type": "string", "maxLength": rng.randint(1, 20)}
        if rng.random() < 0.3:
            s["minLength"] = rng.randint(0, s["maxLength"])
        return s
    if kind == "pattern":
        return {"type": "string",
                "pattern": rng.choice(["^[A-Z][a-z]{1,8}$", "^[0-9]{3}-[0-9]{4}$",
                                       "^(cat|dog|bird)s?$", "^[a-f0-9]{8}$"])}
    if kind == "integer":
        s = {"type": "integer"}
        lo = rng.randint(-1000, 1000)
        if rng.random() < 0.7:
            s["minimum"] = lo
        if rng.random() < 0.7:
            s["maximum"] = lo + rng.randint(0, 5000)
        if "minimum" in s and rng.random() < 0.3:
            s["exclusiveMinimum"] = s.pop("minimum")
        return s
    if kind == "number":
        s = {"type": "number", "minimum": rng.randint(0, 10)}
        if rng.random() < 0.5:
            s["maximum"] = s["minimum"] + rng.randint(1, 1000)
        return s
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        return {"enum": rng.sample(WORDS + [1, 2.5, True, None], rng.randint(1, 4))}
    return {"const": rng.choice(WORDS + [7, False])}


def gen_schema(rng, depth=0):
    roll = rng.random()
    if depth >= 2 or roll < 0.35:
        return gen_scalar(rng)
    if roll < 0.5:
        return {"anyOf": [gen_scalar(rng), gen_scalar(rng)]}
    if roll < 0.7:
        lo = rng.randint(0, 2)
        return {"type": "array", "items": gen_schema(rng, depth + 1), "minItems": lo,
                "maxItems": lo + rng.randint(0, 2)}
    names = rng.sample(["id", "name", "size", "tags", "owner", "ok", "score", "note"],
                       rng.randint(1, 4))
    properties = {n: gen_schema(rng, depth + 1) for n in names}
    required = [n for n in names if rng.random() < 0.7]
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def schema_case(index):
    rng = random.Random(1000 + index)
    schema = gen_schema(rng)
    if index % 3 == 0:  # a top-level object, the usual form of a structured answer
        while schema.get("type") != "object":
            schema = gen_schema(rng)
    return schema


def schema_format(schema, name="answer"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def ask(client, model, schema, seed, **extra):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format=schema_format(schema), temperature=0.8, seed=seed,
        max_tokens=MAX_TOKENS, **extra)


# ---- Tests ------------------------------------------------------------------------------------

def test_generated_schemas_give_outputs_that_validate(client, server):
    schemas = [schema_case(i) for i in range(CASES)]
    for schema in schemas:
        jsonschema.Draft202012Validator.check_schema(schema)  # the generator's own check
    # Eight at a time: constrained choices are decoded in the same batches.
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda i: ask(client, server.model_id, schemas[i], seed=i),
                                range(CASES)))
    for i, (schema, r) in enumerate(zip(schemas, answers)):
        text = r.choices[0].message.content
        context = f"case {i}: schema {json.dumps(schema)} gave {text!r}"
        assert r.choices[0].finish_reason == "stop", context
        value = json.loads(text)
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)
        assert r.usage.completion_tokens <= MAX_TOKENS, context


def test_property_order_formats_and_nested_objects(client, server):
    schema = {
        "type": "object",
        "properties": {
            "zulu": {"type": "string", "format": "date"},
            "alpha": {"type": "string", "format": "uuid"},
            "mid": {"type": "object",
                    "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                                   "list": {"type": "array", "items": {"type": "boolean"},
                                            "maxItems": 2}},
                    "required": ["n", "list"], "additionalProperties": False},
        },
        "required": ["zulu", "alpha", "mid"],
        "additionalProperties": False,
    }
    r = ask(client, server.model_id, schema, seed=3)
    text = r.choices[0].message.content
    value = json.loads(text)
    jsonschema.validate(value, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    # The properties come in the order the schema gives them, not sorted.
    assert list(value) == ["zulu", "alpha", "mid"], text


def test_json_object_mode(client, server):
    r = client.chat.completions.create(
        model=server.model_id, messages=[{"role": "user", "content": "Give the weather in Paris as JSON with keys city and temp."}],
        response_format={"type": "json_object"}, temperature=0, max_tokens=MAX_TOKENS)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_streaming_equals_non_streaming_and_n_choices_all_validate(client, server):
    schema = schema_case(0)
    whole = ask(client, server.model_id, schema, seed=11)
    chunks = list(ask(client, server.model_id, schema, seed=11, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    several = ask(client, server.model_id, schema, seed=5, n=3)
    assert len(several.choices) == 3
    for choice in several.choices:
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_completions_take_response_format_too(client, server):
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
              "minItems": 3, "maxItems": 3}
    r = client.completions.create(model=server.model_id, prompt="Three small numbers:",
                                  max_tokens=MAX_TOKENS, temperature=0,
                                  extra_body={"response_format": schema_format(schema)})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)


@pytest.mark.parametrize("response_format, words", [
    (schema_format({"type": "array", "uniqueItems": True}), "uniqueItems"),
    (schema_format({"type": "string", "pattern": "(?=a)b"}), "lookaround"),
    (schema_format({"type": "integr"}), "integr"),
    (schema_format({"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}),
     "$ref"),
    (schema_format({"enum": ["x" * 1000] * 70}), "65536"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema is required"),
    ({"type": "xml"}, "json_schema"),
])
def test_schemas_pier_cannot_enforce_are_refused_by_name(client, server, response_format, words):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=server.model_id,
                                       messages=[{"role": "user", "content": "x"}],
                                       response_format=response_format, max_tokens=4)
    error = raised.value.body
    assert raised.value.status_code == 400
    assert error["param"] == "response_format", error
    assert words in error["message"], error


def test_a_constrained_request_through_a_worker_process():
    config = write_config(tempfile.mkdtemp(prefix="pier-schema-"), f"""
workers: on
models:
  - {{name: w, path: {PIER_MODEL}, ctx: 1024}}
""")
    s = PierServer(["--config", config], with_model=False)
    try:
        c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)
        schema = schema_case(3)
        r = ask(c, "w", schema, seed=1)
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    finally:
        s.stop_and_check()
