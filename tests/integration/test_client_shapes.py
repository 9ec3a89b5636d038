"""Every client works unchanged against a real node: the anthropic, openai and ollama SDKs on
the demo model, their own error types for an unknown model and a context overflow, and
cancelling a command by id while it streams."""

from __future__ import annotations

import http.client
import json
import threading

import anthropic
import ollama
import openai
import pytest

from tests.integration.conftest import DEMO_DIR
from tests.integration.serving import MODEL, http_json, sse_events, wait_model_ready

TOO_MANY = 10_000_000  # output tokens no demo model can hold: a pre-flight 400
GREEDY = {"temperature": 0}  # the anthropic SDK 2.x has no temperature argument: sent as extra body


@pytest.fixture(scope="module")
def serving(module_nodes, demo_model):
    """One node for the whole file: every test leaves it serving as it was."""
    node = module_nodes(args=("--place", MODEL), models={DEMO_DIR: demo_model})
    wait_model_ready(node)
    return node


def test_anthropic_sdk_messages_stream_and_errors(serving):
    c = anthropic.Anthropic(base_url=serving.url, api_key="none", max_retries=0, timeout=60)
    msg = c.messages.create(model=MODEL, max_tokens=8, extra_body=GREEDY, system="You are terse.",
                            messages=[{"role": "user", "content": "Hello"},
                                      {"role": "assistant", "content": "Hi."},
                                      {"role": "user", "content": [{"type": "text", "text": "Again?"}]}])
    assert msg.type == "message" and msg.role == "assistant" and msg.content[0].type == "text"
    assert msg.stop_reason in ("end_turn", "max_tokens") and 1 <= msg.usage.output_tokens <= 8
    assert msg.usage.input_tokens > 5
    kinds, text = [], []
    with c.messages.stream(model=MODEL, max_tokens=8, extra_body=GREEDY, system="You are terse.",
                           messages=[{"role": "user", "content": "Hello"},
                                     {"role": "assistant", "content": "Hi."},
                                     {"role": "user", "content": "Again?"}]) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content_block_delta":
                text.append(event.delta.text)
        final = stream.get_final_message()
    order = [k for k in kinds if k not in ("text", "ping")]
    assert order[:2] == ["message_start", "content_block_start"]
    assert order[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "".join(text) == msg.content[0].text == final.content[0].text  # greedy: the same answer
    assert final.usage.output_tokens == msg.usage.output_tokens
    with pytest.raises(anthropic.NotFoundError):
        c.messages.create(model="nobody/none", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError, match="context_length_exceeded"):
        c.messages.create(model=MODEL, max_tokens=TOO_MANY, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError):  # Anthropic requires max_tokens
        c.post("/v1/messages", cast_to=object, body={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})


def test_anthropic_stop_sequence_is_reported(serving):
    c = anthropic.Anthropic(base_url=serving.url, api_key="none", max_retries=0, timeout=60)
    free = c.messages.create(model=MODEL, max_tokens=16, extra_body=GREEDY,
                             messages=[{"role": "user", "content": "Count"}]).content[0].text
    stop = free[3:5]
    assert len(free) >= 5 and stop.strip(), f"the demo model's greedy answer {free!r} changed"
    cut = c.messages.create(model=MODEL, max_tokens=16, extra_body=GREEDY, stop_sequences=[stop],
                            messages=[{"role": "user", "content": "Count"}])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == free[:free.index(stop)]


def test_openai_sdk_responses_and_legacy_completions(serving):
    c = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0, timeout=60)
    r = c.responses.create(model=MODEL, input="Hello", instructions="Be terse.", max_output_tokens=8,
                           temperature=0)
    assert r.status in ("completed", "incomplete") and r.output_text and r.usage.output_tokens >= 1
    kinds, deltas = [], []
    for event in c.responses.create(model=MODEL, input=[{"role": "user", "content": "Hello"}],
                                    instructions="Be terse.", max_output_tokens=8, temperature=0, stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.done" in kinds and "".join(deltas) == r.output_text
    done = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert done.object == "text_completion" and done.choices[0].text and done.usage.completion_tokens >= 1
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True))
    assert streamed == done.choices[0].text
    echoed = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0, echo=True)
    assert echoed.choices[0].text == "Once upon a time" + done.choices[0].text
    for call in (lambda **kw: c.responses.create(input="x", **kw),
                 lambda **kw: c.completions.create(prompt="x", **kw)):
        with pytest.raises(openai.NotFoundError):
            call(model="nobody/none")
    with pytest.raises(openai.BadRequestError, match="context_length_exceeded"):
        c.responses.create(model=MODEL, input="x", max_output_tokens=TOO_MANY)
    with pytest.raises(openai.BadRequestError, match="context_length_exceeded"):
        c.completions.create(model=MODEL, prompt="x", max_tokens=TOO_MANY)


def test_ollama_client_chat_generate_tags_and_errors(serving):
    c = ollama.Client(host=serving.url, timeout=60)
    full = c.chat(model=MODEL, messages=[{"role": "user", "content": "Hello"}], stream=False,
                  options={"temperature": 0, "num_predict": 8})
    assert full.done and full.message.role == "assistant" and full.eval_count >= 1
    parts = list(c.chat(model=MODEL, messages=[{"role": "user", "content": "Hello"}], stream=True,
                        options={"temperature": 0, "num_predict": 8}))
    assert parts[-1].done and "".join(p.message.content for p in parts) == full.message.content
    gen = c.generate(model=MODEL, prompt="Once upon a time", stream=False, options={"temperature": 0, "num_predict": 8})
    assert gen.done and gen.response and gen.done_reason in ("stop", "length")
    raw = list(c.generate(model=MODEL, prompt="Once upon a time", raw=True, stream=True,
                          options={"temperature": 0, "num_predict": 8}))
    assert raw[-1].done and "".join(p.response for p in raw)
    assert [m.model for m in c.list().models] == [MODEL]
    assert [m.model for m in c.ps().models] == [MODEL]
    assert c.show(MODEL).details.format == "mlx"
    prefixed = ollama.Client(host=f"{serving.url}/ollama", timeout=60)
    assert [m.model for m in prefixed.list().models] == [MODEL]
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model="nobody/none", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as err:
        c.generate(model=MODEL, prompt="x", stream=False, options={"num_predict": TOO_MANY})
    assert err.value.status_code == 400 and "context_length_exceeded" in err.value.error


def _stream(url: str, body: dict) -> tuple[http.client.HTTPConnection, object]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn, sse_events(conn.getresponse())


def test_cancel_by_command_id_ends_that_stream_and_the_others_continue(serving):
    body = {"model": MODEL, "max_tokens": 1800, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Tell me a long story."}]}
    other_done = {}

    def other() -> None:
        status, reply = http_json(f"{serving.url}/v1/chat/completions", {**body, "stream": False, "max_tokens": 60})
        other_done["ok"] = status == 200 and reply["usage"]["completion_tokens"] == 60

    conn, events = _stream(serving.url, body)
    command_id = next(p.split(" ", 1)[1] for k, p in events if k == "comment" and p.startswith("command_id"))
    first = next(p for k, p in events if k == "data")  # generating now
    assert first["choices"][0]["delta"]["content"] is not None
    worker = threading.Thread(target=other)
    worker.start()
    status, reply = http_json(f"{serving.url}/v1/cancel/{command_id}", method="POST")
    assert (status, reply) == (200, {"message": "Command cancelled.", "command_id": command_id})
    rest = [p for k, p in events if k == "data"]
    conn.close()
    assert rest[-1] == "[DONE]" and rest[-2]["error"]["type"] == "cancelled"
    tokens = [p for p in rest[:-2] if "choices" in p]
    assert len(tokens) < 1700  # it stopped: the rest of its 1800 tokens never came
    worker.join(timeout=60)
    assert other_done.get("ok"), "the other request in the batch did not finish"
    assert http_json(f"{serving.url}/v1/cancel/{command_id}", method="POST")[0] == 404  # finished
    assert http_json(f"{serving.url}/v1/cancel/unknown", method="POST")[0] == 404


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}}}


def test_response_format_json_schema_constrains_every_sampled_answer(serving):
    import jsonschema

    c = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0, timeout=120)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    answers: list[str] = [""] * 20

    def ask(i: int) -> None:
        answers[i] = c.chat.completions.create(
            model=MODEL, max_tokens=200, temperature=1.0, seed=i, response_format=fmt,
            messages=[{"role": "user", "content": f"Person number {i} as JSON"}]).choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for text in answers:
        jsonschema.validate(json.loads(text), PERSON)  # every one: valid JSON of the schema
    assert len(set(answers)) > 1  # sampled, not one canned answer
    free = c.chat.completions.create(model=MODEL, max_tokens=30, temperature=0,
                                     messages=[{"role": "user", "content": "Person number 1 as JSON"}])
    with pytest.raises(json.JSONDecodeError):  # the same model unconstrained: not JSON
        json.loads(free.choices[0].message.content)
    ollama_json = ollama.Client(host=serving.url, timeout=60).chat(
        model=MODEL, messages=[{"role": "user", "content": "x"}], stream=False, format=PERSON,
        options={"num_predict": 200, "temperature": 1.0, "seed": 3})
    jsonschema.validate(json.loads(ollama_json.message.content), PERSON)
    with pytest.raises(openai.BadRequestError, match="response_format"):
        c.chat.completions.create(model=MODEL, max_tokens=4, response_format={"type": "xml"},
                                  messages=[{"role": "user", "content": "x"}])
