"""``python -m benchmarks.retrieval --quick`` runs end to end and writes sane results.

Quality floors are loose on purpose (a 20-query subset is noisy); the full-run numbers live in
``benchmarks/results/retrieval_scifact.json``. No timing assertions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models import paths
from tests.conftest import run_benchmark

pytestmark = pytest.mark.slow
METHODS = (
    "bm25",
    "bm25_unstemmed",
    "dense_int8",
    "dense_fp32",
    "hybrid_rrf_int8",
    "hybrid_convex_int8",
    "hybrid_rrf_fp32",
    "hybrid_convex_fp32",
)


def test_quick_retrieval_benchmark(tmp_path: Path, corpus: Path) -> None:
    onnx = paths.encoder_onnx_path()
    if not ((onnx / paths.ONNX_INT8).is_file() and (onnx / paths.ONNX_FP32).is_file()):
        pytest.skip("encoder weights not prepared: run `brief prepare-models`")
    stdout = run_benchmark("retrieval", "--quick", "--corpus", corpus, "--out", tmp_path)
    assert "nDCG@10" in stdout
    data = json.loads((tmp_path / "retrieval_scifact_quick.json").read_text())
    assert (tmp_path / "retrieval_scifact_quick.png").stat().st_size > 1000

    assert data["quick"] is True
    assert data["config"]["queries"] == 20 and data["config"]["docs"] > 60
    results = data["results"]
    assert set(METHODS) <= set(results)
    for name in METHODS:
        r = results[name]
        for metric in ("ndcg@10", "recall@10", "recall@100"):
            assert 0 < r[metric] <= 1.0 + 1e-9, (name, metric, r[metric])
        assert r["recall@10"] <= r["recall@100"] + 1e-9
        assert r["ndcg@10"] > 0.3, (name, r["ndcg@10"])  # random ranking here: ~0.1
    assert results["bm25"]["ndcg@10"] > 0.4
    # The benchmark's fusion reproduces SessionIndex.search exactly.
    for variant in ("int8", "fp32"):
        assert data["summary"]["engine_path_agreement"][variant] == {"rrf": 1.0, "convex": 1.0}


def test_quick_financebench_benchmark(tmp_path: Path, corpus: Path) -> None:
    """The three smallest filings: parse, chunk, index, embed, search; sane hit rates."""
    if not (paths.encoder_onnx_path() / paths.ONNX_INT8).is_file():
        pytest.skip("encoder weights not prepared: run `brief prepare-models`")
    if not (corpus / "qa/financebench/pdfs").is_dir():
        pytest.skip("FinanceBench PDFs not in the corpus")
    run_benchmark("financebench", "--quick", "--corpus", corpus, "--out", tmp_path)
    data = json.loads((tmp_path / "financebench_quick.json").read_text())
    assert (tmp_path / "financebench_quick.png").stat().st_size > 1000
    assert data["config"]["documents"] == 3
    summary = data["summary"]
    for method in ("bm25", "dense", "hybrid_rrf", "hybrid_convex"):
        s = summary[method]
        assert s["n"] >= 3, method  # the budget covers three small filings
        assert 0 <= s["hit@1"] <= s["hit@5"] <= s["hit@10"] <= 1, method
    assert summary["bm25"]["hit@10"] > 0  # a filing of a few pages: the evidence is findable
    for doc in data["documents"]:
        assert doc["pages"] <= 20 and doc["small_chunks"] > 0
