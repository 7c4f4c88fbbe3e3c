"""The server as a user sees it: a real `python -m server` with the real models on loopback,
driven by the official openai SDK (the "Done when" of the Foundation issue)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest

pytestmark = pytest.mark.slow


def chat_model(client) -> str:
    return next(m.id for m in client.models.list().data if "mpnet" not in m.id)


def test_models_list(client):
    ids = [m.id for m in client.models.list().data]
    assert "all-mpnet-base-v2" in ids
    assert any("qwen" in i.lower() for i in ids)


def test_chat_completion_non_stream(client):
    r = client.chat.completions.create(
        model=chat_model(client),
        messages=[{"role": "user", "content": "Say hello in one word."}],
        max_tokens=8,
        temperature=0,
    )
    assert r.choices[0].message.content.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 8


def test_chat_completion_stream(client):
    stream = client.chat.completions.create(
        model=chat_model(client),
        messages=[{"role": "user", "content": "Count from 1 to 5."}],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "1" in text and finish in ("stop", "length")
    assert usage is not None and usage.completion_tokens >= 1


def test_json_schema_completion_parses(client):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "country": {"type": "string"},
            "population_millions": {"type": "number"},
        },
        "required": ["city", "country", "population_millions"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=chat_model(client),
        messages=[{"role": "user", "content": "Give the capital of France as JSON."}],
        max_tokens=60,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "capital", "schema": schema, "strict": True},
        },
    )
    data = json.loads(r.choices[0].message.content)
    assert set(data) == {"city", "country", "population_millions"}
    assert isinstance(data["population_millions"], int | float)


def test_embeddings_768d_both_encodings(client):
    texts = ["The cat sat on the mat.", "A feline rested on a rug.", "Quarterly revenue grew 12%."]
    r = client.embeddings.create(model="all-mpnet-base-v2", input=texts)  # SDK asks for base64
    vecs = np.array([d.embedding for d in r.data])
    assert vecs.shape == (3, 768)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]  # paraphrase closer than unrelated text
    # Same request shape in float format: int8 activations are quantised per batch, so a text's
    # vector differs slightly with its batch mates; within one request shape it is deterministic.
    f = client.embeddings.create(model="all-mpnet-base-v2", input=texts, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in f.data], vecs, atol=1e-5)
    assert r.usage.prompt_tokens > 0


def test_errors_through_the_sdk(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="all-mpnet-base-v2", input=[])
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(
            model=chat_model(client),
            messages=[{"role": "user", "content": "x"}],
            temperature=7,
        )


def test_health_and_metrics_live(live_server, client):
    client.embeddings.create(model="all-mpnet-base-v2", input=["metrics please"])
    h = httpx.get(live_server.base_url + "/health").json()
    assert h["status"] == "ok"
    text = httpx.get(live_server.base_url + "/metrics").text
    assert "brief_encoder_batch_size_count" in text
    assert "brief_generated_tokens_total" in text
