"""``python -m benchmarks.rewriting --quick`` runs the real rewriter end to end and writes a sane
report (no speed limits): scores in [0, 1], the copy-the-question baseline next to ours, counts
that add up, and a baseline that scores exactly 1 wherever the human kept the question."""

from __future__ import annotations

import json

import pytest

from benchmarks.rewriting import METRICS, QUICK, SUBSETS
from models import paths
from tests.conftest import run_benchmark

pytestmark = pytest.mark.slow
LIMIT = 4  # per set (quick alone is 10): 3 LLM calls, both sets call it; ~1-2 min on 2 cores


def test_quick_rewriting_benchmark(tmp_path, corpus):
    pytest.importorskip("llama_cpp", reason="needs the [cpu] extra (llama-cpp-python)")
    if (
        not paths.llm_gguf_path().is_file()
        or not (paths.encoder_onnx_path() / paths.ONNX_INT8).is_file()
    ):
        pytest.skip("weights not prepared: run `brief prepare-models`")
    args = ["--quick", "--limit", LIMIT, "--corpus", corpus, "--out", tmp_path]
    assert "copy" in run_benchmark("rewriting", *args)
    data = json.loads((tmp_path / "rewriting_quick.json").read_text())
    assert (tmp_path / "rewriting_quick.png").stat().st_size > 1000

    assert data["quick"] is True and data["config"]["seed"] == 5
    n = min(QUICK, LIMIT)
    assert data["config"]["sizes"] == {"canard": n, "mtrag": n}
    assert len(data["examples"]) == 2 * n
    for ds, s in data["summary"].items():
        assert s["examples"] == n
        assert s["llm_calls"] + s["skipped_llm"] == n
        assert 0 <= s["skip_rate"] <= 1 and 0 <= s["human_changed"] <= n
        assert s["skipped_but_human_changed"] <= min(s["skipped_llm"], s["human_changed"])
        assert sum(s["fallbacks"].values()) <= s["llm_calls"]
        if s["llm_calls"]:
            assert s["llm_latency_mean_s"] > 0 and s["prompt_tokens_mean"] > 100
        sc = s["scores"]
        assert sc["all"]["n"] == sc["human_changed"]["n"] + sc["human_same"]["n"] == n
        for subset in SUBSETS:
            if sc[subset]["n"] == 0:
                continue
            for side in ("ours", "baseline"):
                for m in METRICS:
                    assert -1e-6 <= sc[subset][side][m] <= 1 + 1e-6, (ds, subset, side, m)
        if sc["human_same"]["n"]:  # copying the question is the human rewrite there
            assert sc["human_same"]["baseline"]["f1"] == 1.0
            assert sc["human_same"]["baseline"]["cosine"] > 0.999
    for r in data["examples"]:
        if r["skipped_llm"]:
            assert r["rewrite"] == r["question"] and r["prompt_tokens"] == 0
        assert r["rewrite"].strip()

    # --rescore recomputes the same summary from the stored rewrites, without the LLM.
    again = tmp_path / "again"
    run_benchmark(
        "rewriting", "--rescore", tmp_path / "rewriting_quick.json", "--out", again, timeout=300
    )
    redo = json.loads((again / "rewriting_quick.json").read_text())
    same = json.dumps(redo["summary"], sort_keys=True) == json.dumps(
        data["summary"], sort_keys=True
    )
    assert same  # compared as JSON text: a NaN (no LLM call in a set) equals itself there

    # --replay re-resolves the stored LLM outputs with the current code: the same code gives
    # the same rewrites, so nothing changes.
    replayed = tmp_path / "replayed"
    out = run_benchmark(
        "rewriting",
        *("--replay", tmp_path / "rewriting_quick.json", "--corpus", corpus, "--out", replayed),
        timeout=300,
    )
    assert "0 rewrites changed" in out
    redo = json.loads((replayed / "rewriting_quick.json").read_text())
    assert redo["config"]["replayed"]["changed"] == 0
    assert [r["rewrite"] for r in redo["examples"]] == [r["rewrite"] for r in data["examples"]]
