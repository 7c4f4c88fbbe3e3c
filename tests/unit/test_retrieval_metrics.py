"""BEIR metrics (nDCG@k, recall@k) against values worked out by hand, and the seeded subset."""

from __future__ import annotations

import math

import pytest

from benchmarks.retrieval_data import (
    RetrievalData,
    evaluate,
    ndcg_at_k,
    recall_at_k,
    subset,
)


def test_ndcg_perfect_and_empty() -> None:
    assert ndcg_at_k(["a", "b", "x"], {"a": 1, "b": 1}, 10) == pytest.approx(1.0)
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0
    assert ndcg_at_k(["x", "y"], {"a": 1}, 10) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0  # nothing relevant: 0, not a division error


def test_ndcg_by_hand() -> None:
    # relevant at ranks 2 and 4 of two relevant documents
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(["x", "a", "y", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(dcg / idcg)
    # the cut-off drops the document at rank 4
    assert ndcg_at_k(["x", "a", "y", "b"], {"a": 1, "b": 1}, 3) == pytest.approx(
        (1 / math.log2(3)) / idcg
    )


def test_ndcg_graded_uses_linear_gain_and_ideal_order() -> None:
    judged = {"a": 2, "b": 1}
    got = ndcg_at_k(["b", "a"], judged, 10)
    want = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert got == pytest.approx(want)
    assert ndcg_at_k(["a", "b"], judged, 10) == pytest.approx(1.0)


def test_ndcg_ideal_is_cut_at_k() -> None:
    # three relevant, k=1: a relevant document first is perfect
    assert ndcg_at_k(["a"], {"a": 1, "b": 1, "c": 1}, 1) == pytest.approx(1.0)


def test_recall() -> None:
    judged = {"a": 1, "b": 1, "c": 0}
    assert recall_at_k(["a", "x", "b"], judged, 2) == pytest.approx(0.5)
    assert recall_at_k(["a", "x", "b"], judged, 3) == pytest.approx(1.0)
    assert recall_at_k(["c"], judged, 10) == 0.0  # grade 0 is not relevant
    assert recall_at_k(["a"], {"a": 0}, 10) == 0.0


def test_evaluate_averages_over_all_judged_queries() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    scores = evaluate({"q1": ["a"]}, qrels)  # q2 answered nothing: counts as 0
    assert scores["ndcg@10"] == pytest.approx(0.5)
    assert scores["recall@10"] == pytest.approx(0.5)
    assert scores["recall@100"] == pytest.approx(0.5)


def test_subset_keeps_judged_docs_and_is_seeded() -> None:
    data = RetrievalData(
        docs={f"d{i}": f"word{i} " * 80 for i in range(50)},
        queries={f"q{i}": f"query {i}" for i in range(10)},
        qrels={f"q{i}": {f"d{i}": 1} for i in range(10)},
    )
    a = subset(data, 4, 5, seed=1, max_words=10)
    b = subset(data, 4, 5, seed=1, max_words=10)
    assert a == b
    assert len(a.queries) == 4 and len(a.docs) == 9
    assert all(d in a.docs for q in a.queries for d in a.qrels[q])
    assert all(len(t.split()) == 10 for t in a.docs.values())
