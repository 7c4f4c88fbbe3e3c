"""BM25, dense and hybrid session index: ranking, fusion, removal, partial embedding, filters."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from engine.index.bm25 import BM25Index, tokenize
from engine.index.dense import DenseIndex
from engine.index.hybrid import SessionIndex, convex, rrf
from engine.ingest.chunking import build_chunks, whitespace_tokens
from engine.ingest.document import Chunk, Paragraph

DIM = 64


def fake_embed(texts: list[str]) -> np.ndarray:
    """Bag of hashed words, L2-normalised: texts sharing words are close (a stand-in encoder)."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for tok in tokenize(text):
            out[i, int(hashlib.md5(tok.encode()).hexdigest(), 16) % DIM] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1, norms)


TEXTS = [
    "the duck swims in the lake and eats bread",
    "quarterly revenue grew by ten percent in the third quarter",
    "hnsw graphs give approximate nearest neighbour search",
    "bm25 is a lexical ranking function built on term frequency",
    "ducks and geese are waterfowl that swim",
    "operating income and revenue by business segment",
]


@pytest.mark.parametrize("backend", ["incremental", "bm25s", "rank_bm25"])
def test_bm25_backends_agree(backend):
    idx = BM25Index(backend=backend)
    idx.add(range(len(TEXTS)), TEXTS)
    labels, scores = idx.search("revenue by segment", 3)
    assert labels[0] == 5 and set(labels[:2]) == {1, 5}
    assert np.all(np.diff(scores) <= 0) and np.all(scores > 0)
    # filter and removal
    allowed = np.zeros(10, dtype=bool)
    allowed[1] = True
    assert idx.search("revenue by segment", 3, allowed)[0].tolist() == [1]
    idx.remove([5])
    assert 5 not in idx.search("revenue segment", 5)[0].tolist()
    assert idx.search("zebra", 5)[0].size == 0
    assert idx.search("the of", 5)[0].size == 0  # stopwords only


def test_bm25_matches_inflections_through_stems():
    assert tokenize("Revenues grew; the ducks swimming") == ["revenu", "grew", "duck", "swim"]
    assert tokenize("Revenues grew", stem=False) == ["revenues", "grew"]
    idx, plain = BM25Index(), BM25Index(stem=False)
    for i in (idx, plain):
        i.add(range(len(TEXTS)), TEXTS)
    assert sorted(idx.search("swimming ducks", 2)[0].tolist()) == [0, 4]  # swims+duck, ducks+swim
    assert plain.search("swimming ducks", 2)[0].tolist() == [4]


def test_stemming_from_many_threads_agrees():
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"{t} {t.upper()} revenues operating segments" for t in TEXTS] * 50
    expected = [tokenize(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(tokenize, texts)) == expected


def test_incremental_scores_equal_bm25s():
    a, b = BM25Index(backend="incremental"), BM25Index(backend="bm25s")
    for idx in (a, b):
        idx.add(range(4), TEXTS[:4])
        idx.add(range(4, 6), TEXTS[4:])  # added later: idf must follow
        idx.remove([2])
    la, sa = a.search("duck swim revenue quarter", 6)
    lb, sb = b.search("duck swim revenue quarter", 6)
    assert la.tolist() == lb.tolist()
    np.testing.assert_allclose(sa, sb, rtol=1e-4)


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_dense_search_remove_filter_grow(backend):
    vecs = fake_embed(TEXTS)
    idx = DenseIndex(DIM, backend=backend)
    idx.add([10, 11, 12], vecs[:3])
    idx.add([13, 14, 15], vecs[3:])
    q = fake_embed(["ducks swim in a lake"])[0]
    labels, scores = idx.search(q, 2)
    assert set(labels.tolist()) == {10, 14}
    assert scores[0] >= scores[1] and scores[0] <= 1.0001
    idx.remove([10])
    assert 10 not in idx.search(q, 6)[0].tolist()
    assert len(idx) == 5
    allowed = np.zeros(20, dtype=bool)
    allowed[[11, 15]] = True
    assert set(idx.search(q, 6, allowed)[0].tolist()) == {11, 15}
    # growing past the initial capacity keeps everything searchable
    many = np.random.default_rng(0).standard_normal((1500, DIM)).astype(np.float32)
    many /= np.linalg.norm(many, axis=1, keepdims=True)
    idx.add(range(100, 1600), many)
    assert idx.search(many[700], 1)[0][0] == 800
    assert len(idx) == 1505


def test_dense_switches_to_hnsw_above_threshold():
    idx = DenseIndex(DIM, backend="auto", hnsw_threshold=50)
    vecs = np.random.default_rng(1).standard_normal((80, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    idx.add(range(40), vecs[:40])
    assert not idx.uses_hnsw
    idx.add(range(40, 80), vecs[40:])
    assert idx.uses_hnsw
    assert idx.search(vecs[63], 1)[0][0] == 63


def test_fusion_functions():
    fused = rrf([[1, 2, 3], [3, 1]])
    assert max(fused, key=fused.get) == 1
    assert fused[3] > fused[2]
    c = convex({1: 0.9, 2: 0.1}, {2: 10.0, 3: 5.0}, alpha=0.5)
    assert c[1] == pytest.approx(0.5) and c[2] == pytest.approx(0.5) and c[3] == 0.0
    assert convex({}, {7: 1.0}, alpha=0.3)[7] == pytest.approx(0.7)


def doc_chunks(doc_id: str, texts: list[str]) -> dict[str, list[Chunk]]:
    paras = [Paragraph(i, t, page=i + 1) for i, t in enumerate(texts)]
    return build_chunks(doc_id, paras, whitespace_tokens, {"small": 12, "large": 40})


def test_session_index_hybrid_partial_embedding_and_removal():
    idx = SessionIndex(DIM)
    a = doc_chunks("doc-a", TEXTS[:3])
    b = doc_chunks("doc-b", TEXTS[3:])
    idx.add_document("doc-a", a)
    idx.add_document("doc-b", b)
    assert idx.stats()["small"] == {"chunks": 6, "embedded": 0}

    # searchable by BM25 before any vector arrives
    hits = idx.search("revenue quarter", None, k=3)
    assert hits[0].doc_id == "doc-a" and hits[0].chunk.start == 1
    assert hits[0].bm25_rank == 1 and hits[0].dense_rank is None

    # embed doc-b only: the dense side covers only embedded chunks
    small_b = idx.chunks("doc-b", "small")
    assert idx.add_vectors(small_b, fake_embed([c.text for c in small_b])) == 3
    assert {c.doc_id for c in idx.unembedded(level="small")} == {"doc-a"}
    assert idx.vector(small_b[0]) is not None and idx.vector(small_b[0].key) is not None
    assert idx.vector(idx.chunks("doc-a", "small")[0]) is None  # not embedded yet
    q = "ducks swim"
    hits = idx.search(q, fake_embed([q])[0], k=6)
    dense = [h for h in hits if h.dense_rank is not None]
    assert dense and all(h.doc_id == "doc-b" for h in dense)
    assert hits[0].chunk.text == TEXTS[4]  # both retrievers agree on the duck/geese chunk
    convex_hits = idx.search(q, fake_embed([q])[0], k=3, fusion="convex", alpha=0.7)
    assert convex_hits[0].chunk.text == TEXTS[4]

    # document filter
    q = "duck lake"
    only_a = idx.search(q, fake_embed([q])[0], k=6, doc_ids=["doc-a"])
    assert only_a and {h.doc_id for h in only_a} == {"doc-a"}
    assert idx.search(q, None, k=5, doc_ids=["nope"]) == []

    # neighbours for window expansion
    mid = idx.chunk("doc-b", "small", 1)
    assert mid is not None and idx.chunk("doc-b", "small", 0).end + 1 == mid.start
    assert idx.chunk("doc-b", "small", 99) is None

    # removal: gone from both sides; late vectors of a removed document are ignored
    assert idx.remove_document("doc-b")
    assert all(h.doc_id == "doc-a" for h in idx.search(q, fake_embed([q])[0], k=6))
    assert idx.add_vectors(small_b, fake_embed([c.text for c in small_b])) == 0
    assert idx.vector(small_b[0]) is None
    assert idx.chunk("doc-b", "small", 1) is None
    assert not idx.remove_document("doc-b")
    assert idx.documents() == ["doc-a"]

    # large level is independent
    assert idx.search("bm25 lexical", None, k=1, level="large") == []  # doc-b removed
    assert idx.search("revenue", None, k=1, level="large")[0].chunk.level == "large"


def test_session_index_readd_replaces_document():
    idx = SessionIndex(DIM)
    idx.add_document("d", doc_chunks("d", ["old words here"]))
    idx.add_document("d", doc_chunks("d", ["new words here"]))
    assert idx.search("old", None, k=3) == []
    assert idx.search("new", None, k=3)[0].chunk.text == "new words here"
    assert idx.stats()["small"]["chunks"] == 1
