"""SessionDocuments.embed_query: no vector before anything is embedded, and one encoder call per
distinct query within a turn (routing and the context builder ask for the same vectors)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from engine.session.store import Session
from engine.session.view import SessionDocuments


class CountingEncoder:
    model_name, dimension = "counting", 4

    def __init__(self, fail_first: bool = False):
        self.calls: list[list[str]] = []
        self.fail_first = fail_first

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        await asyncio.sleep(0.01)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("encoder hiccup")
        return np.full((len(texts), 4), len(texts[0]), dtype=np.float32)


class Stats:
    def __init__(self, embedded: int):
        self.embedded = embedded

    def stats(self) -> dict[str, dict[str, int]]:
        return {"small": {"chunks": 3, "embedded": self.embedded}}


def view(encoder: CountingEncoder, embedded: int = 3) -> SessionDocuments:
    return SessionDocuments(Session("s1", None, 60.0, index=Stats(embedded)), encoder)  # type: ignore[arg-type]


async def test_nothing_embedded_yet_means_no_query_vector():
    enc = CountingEncoder()
    assert await view(enc, embedded=0).embed_query("dense retrieval") is None
    assert enc.calls == []


async def test_each_distinct_query_is_embedded_once_per_view():
    enc = CountingEncoder()
    v = view(enc)
    a, b, c = await asyncio.gather(
        v.embed_query("dense retrieval"), v.embed_query("dense retrieval"), v.embed_query("BM25")
    )
    again = await v.embed_query("dense retrieval")
    assert sorted(map(tuple, enc.calls)) == [("BM25",), ("dense retrieval",)]
    assert np.array_equal(a, b) and np.array_equal(a, again) and not np.array_equal(a, c)
    await view(enc).embed_query("dense retrieval")  # a new turn's view embeds afresh
    assert len(enc.calls) == 3


async def test_a_failed_embedding_is_retried_not_remembered():
    enc = CountingEncoder(fail_first=True)
    v = view(enc)
    with pytest.raises(RuntimeError):
        await v.embed_query("dense retrieval")
    assert (await v.embed_query("dense retrieval")).shape == (4,)
    assert len(enc.calls) == 2
