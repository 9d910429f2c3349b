"""The request schema (given code, not graded): the pydantic models of protocol.py are what
/openapi.json publishes and what parse_request enforces, and a body FastAPI itself refuses
gets OpenAI's 400 naming the field, as every other refusal does."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.exceptions import RequestValidationError

import course

srv = course.load("server")
M = "course-gpt"
LIMITS = srv.Limits(context=128, vocab_size=257, max_n=4)
ENDPOINTS = {"/v1/completions": ("completion", "prompt"), "/v1/chat/completions": ("chat", "messages")}


def _resolve(doc: dict, schema: dict) -> dict:
    ref = schema.get("$ref", "")
    assert ref.startswith("#/components/schemas/"), f"a request body is a reference to components: {schema}"
    return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]


@pytest.mark.given
def test_openapi_lists_both_endpoints_with_their_request_schemas(server, kit):
    with kit.client(server) as c:
        r = c.get("/openapi.json")
    assert r.status_code == 200, r.text
    doc = r.json()
    for path, (kind, field) in ENDPOINTS.items():
        body = doc["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        schema = _resolve(doc, body["content"]["application/json"]["schema"])
        assert schema["additionalProperties"] is False, "an unknown field is refused: the schema says so"
        assert set(schema["required"]) == {"model", field}
        props = schema["properties"]
        assert {"model", field, "max_tokens", "n", "temperature", "stream", "stop"} <= set(props)
        assert props["temperature"]["anyOf"][0] == {"type": "number", "minimum": 0, "maximum": 2}
        assert props["temperature"]["description"] == "a number in [0, 2]", "the rule a 400 states"
        assert ("messages" in props) == (kind == "chat") and ("prompt" in props) == (kind == "completion")
        # every $ref in the document resolves (nested models: ChatMessage, StreamOptions, TextPart)
        for ref in _refs(doc):
            assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"], ref


def _refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


@pytest.mark.given
@pytest.mark.parametrize("path", sorted(ENDPOINTS))
def test_the_published_schema_is_the_one_enforced(server, kit, path):
    """Every property /openapi.json lists is accepted at null (its default): the body gets past
    the schema to the model's 404; a field it does not list is a 400 naming it."""
    kind, field = ENDPOINTS[path]
    with kit.client(server) as c:
        doc = c.get("/openapi.json").json()
    schema = _resolve(doc, doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"])
    base = {"model": M, "prompt": "hi"} if kind == "completion" else \
        {"model": M, "messages": [{"role": "user", "content": "hi"}]}
    nulls = {name: None for name in schema["properties"] if name not in schema["required"]}
    with pytest.raises(srv.APIError) as err:  # the model is checked after the schema: past it
        srv.parse_request({**base, **nulls, "model": "no-such-model"}, kind, LIMITS)
    assert err.value.status == 404, err.value.message
    other = "messages" if kind == "completion" else "prompt"
    assert other not in schema["properties"]
    with pytest.raises(srv.APIError) as err:
        srv.parse_request({**base, other: "x"}, kind, LIMITS)
    assert (err.value.status, err.value.param) == (400, other)


@pytest.mark.given
@pytest.mark.parametrize("body, param, message", [
    ({"model": M, "prompt": "x", "top_k": 5}, "top_k", "Unrecognized request argument supplied: top_k"),
    ({"model": M, "prompt": "x", "temperature": 2.5}, "temperature", "temperature must be a number in [0, 2], got 2.5"),
    ({"model": M, "prompt": "x", "stream": "yes"}, "stream", "stream must be a boolean, got 'yes'"),
    ({"prompt": "x"}, "model", "you must provide a model parameter"),
    ({"model": M, "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options",
     "stream_options are only allowed when stream is true"),
])
def test_refusals_say_the_rule_and_name_the_field(body, param, message):
    with pytest.raises(srv.APIError) as err:
        srv.parse_request(body, "completion", LIMITS)
    assert (err.value.status, err.value.param, err.value.message) == (400, param, message)


@pytest.mark.given
def test_a_body_fastapi_refuses_is_openai_shaped(server):
    """A route whose body FastAPI validates (none of today's: they read their own) answers
    OpenAI's 400 naming the field, not FastAPI's 422: the app's RequestValidationError handler."""
    handler = server.app.exception_handlers[RequestValidationError]
    exc = RequestValidationError([{"type": "bool_type", "loc": ("body", "messages", 0, "role"), "msg": "x",
                                   "input": 3}, {"type": "extra_forbidden", "loc": ("body", "foo"), "msg": "x",
                                                 "input": 1}])
    r = asyncio.run(handler(None, exc))
    assert r.status_code == 400
    assert r.body == (b'{"error":{"message":"Unrecognized request argument supplied: foo",'
                      b'"type":"invalid_request_error","param":"foo","code":null}}')
