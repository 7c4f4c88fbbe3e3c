"""Metrics of the evaluation harness on hand-made fakes (no server, no model)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import eval_metrics as m
from benchmarks.cases_check import FIELDS, load_cases, schema_errors
from benchmarks.eval import LLMGrader, resumed

CASES = Path(__file__).resolve().parents[2] / "benchmarks" / "cases"
A, B = "docs/a.pdf", "docs/b.md"


def case(**over) -> dict:
    base = {
        "id": "c1",
        "kind": "fact",
        "documents": [A, B],
        "turns": [],
        "question": "When was it founded?",
        "gold_operations": [{"action": "SEARCH", "document": A}],
        "gold_evidence": [{"document": A, "page": 2, "quote": "founded  in\n1911"}],
        "answer": "In 1911.",
        "answer_keywords": ["1911"],
    }
    return base | over


def test_norm_and_contains_ignore_whitespace_case_and_nfkc():
    assert m.contains("IBM was Founded\n in 1911 as CTR", "founded in 1911")
    assert m.contains("kilograms CO₂e/boe", "co2e/boe")  # NFKC folds the subscript
    assert not m.contains("anything", "  ")


def test_planner_metrics():
    gold = [{"action": "SEARCH", "document": A}, {"action": "SEARCH", "document": B}]
    got = m.planner_metrics(gold, [("SEARCH", A), ("READ", B), ("SEARCH", "other")])
    assert got["action_accuracy"] == 0.0  # READ was not asked for
    assert got["resource_precision"] == pytest.approx(2 / 3)
    assert got["resource_recall"] == 1.0
    assert got["op_recall"] == 0.5
    empty = m.planner_metrics(gold, [])
    assert empty["resource_precision"] is None and empty["resource_recall"] == 0.0
    assert m.planner_metrics(gold[:1], [("SEARCH", A)])["action_accuracy"] == 1.0


def paras() -> list[m.Para]:
    return [
        m.Para(B, 0, 0.9, "IBM was founded in 1911", None),  # right text, wrong document
        m.Para(A, 3, 0.8, "noise", 2),
        m.Para(A, 5, 0.7, "It was founded in 1911 as CTR.", 2),
        m.Para(A, 5, 0.1, "It was founded in 1911 as CTR.", 2),  # duplicate, lower score
    ]


def test_rank_dedupes_keeping_best_score():
    ranked = m.rank(paras())
    assert [(p.document, p.paragraph, p.score) for p in ranked] == [
        (B, 0, 0.9),
        (A, 3, 0.8),
        (A, 5, 0.7),
    ]


def test_retrieval_metrics_recall_precision_and_page():
    ev = case()["gold_evidence"]
    got = m.retrieval_metrics(ev, m.rank(paras()), [2, 3])
    assert got["recall@2"] == 0.0 and got["precision@2"] == 0.0
    assert got["recall@3"] == 1.0 and got["precision@3"] == pytest.approx(1 / 3)
    assert got["recall@all"] == 1.0 and got["page_match"] == 1.0
    wrong_page = [dict(ev[0], page=7)]
    assert m.retrieval_metrics(wrong_page, m.rank(paras()), [3])["page_match"] == 0.0
    none = m.retrieval_metrics([], m.rank(paras()), [3])
    assert none["recall@3"] is None and none["recall@all"] is None and none["page_match"] is None
    assert m.retrieval_metrics(ev, [], [3])["precision@3"] == 0.0


def test_cited_sentence_finds_the_sentence_before_the_marker():
    text = "IBM is big [1]. It was founded in 1911 [2]. Done."
    idx = text.index("[2]")
    assert m.cited_sentence(text, idx) == "It was founded in 1911"
    assert m.cited_sentence(text, text.index("[1]")) == "IBM is big"


def test_citation_metrics_support_and_recall():
    answer = "IBM was founded in 1911 as CTR [1]. Ducks swim in lakes [2]."
    cits = [
        (answer.index("[1]"), A, "It was founded in 1911 as CTR."),
        (answer.index("[2]"), A, "Quarterly revenue grew."),
    ]
    cited = [m.Para(A, 5, 0, "It was founded in 1911 as CTR.", 2)]
    got = m.citation_metrics(answer, cits, case()["gold_evidence"], cited, threshold=0.4)
    assert got["citation_correct"] == 0.5
    assert 0 < got["citation_support"] < 1
    assert got["citation_recall"] == 1.0 and got["n_citations"] == 2
    none = m.citation_metrics("No citations.", [], [], [], 0.4)
    assert none["citation_correct"] is None and none["citation_recall"] is None


def test_keywords_and_abstention():
    assert m.keyword_accuracy(
        "Founded in 1911 [1] by CTR", ["1911", "ctr", "Watson"]
    ) == pytest.approx(2 / 3)
    assert m.keyword_accuracy("x", []) is None
    for refusal in (
        "The document does not mention the CEO.",
        "This information is not provided in the passages.",
        "I cannot find the revenue in the documents.",
        "There is no information about MS MARCO.",
    ):
        assert m.abstained(refusal), refusal
    assert not m.abstained("IBM was founded in 1911 [1].")


def test_grade_values():
    assert [m.grade_value(x) for x in ("Yes", "somewhat.", " NO ", "maybe", None)] == [
        1.0,
        0.5,
        0.0,
        None,
        None,
    ]


def test_aggregate_skips_none_and_errors():
    rows = [
        {"kind": "fact", "metrics": {"kw": 1.0, "p": None}, "timings": {"total_s": 2.0}},
        {"kind": "fact", "metrics": {"kw": 0.0, "p": 0.5}, "timings": {"total_s": 4.0}},
        {"kind": "summary", "metrics": {"kw": 0.5}, "timings": {}},
        {"kind": "fact", "error": "boom"},
    ]
    agg = m.aggregate(rows)
    assert agg["errors"] == 1 and agg["overall"]["n"] == 3
    assert agg["overall"]["kw"] == 0.5 and agg["by_kind"]["fact"]["p"] == 0.5
    assert agg["by_kind"]["fact"]["latency"]["total_s"]["median"] == 3.0
    assert set(agg["by_kind"]) == {"fact", "summary"}


def test_chart_draws_no_bar_for_a_metric_that_does_not_apply(tmp_path, monkeypatch):
    """Abstention on a fact case, or keywords on an unanswerable one, is absent, not 0%."""
    from benchmarks import common
    from benchmarks import eval as ev

    drawn = {}
    real = common.bar_chart

    def spy(name, groups, series, *args, **kwargs):
        drawn.update(series)
        return real(name, groups, series, *args, **kwargs)

    monkeypatch.setattr(ev, "bar_chart", spy)
    agg = {
        "by_kind": {
            "fact": {"resource_recall": 1.0, "keyword_accuracy": 0.5},
            "unanswerable": {"resource_recall": 1.0, "abstention": 0.0},
        }
    }
    path = ev.chart("eval_chart_test", agg, "note", tmp_path)
    assert path.is_file() and path.stat().st_size > 0
    assert drawn["keywords"] == [50.0, None] and drawn["abstention"] == [None, 0.0]


class FakeClient:
    """Just enough of ``openai.OpenAI`` for the grader: canned JSON replies."""

    def __init__(self, replies: list[str]):
        self.replies, self.prompts = replies, []
        self.chat = self
        self.completions = self

    def create(self, **kw):
        self.prompts.append(kw["messages"][0]["content"])
        msg = type("M", (), {"content": self.replies.pop(0)})
        return type("R", (), {"choices": [type("C", (), {"message": msg})]})


def test_llm_grader_parses_replies_and_survives_bad_json():
    client = FakeClient(
        [
            json.dumps({"completeness": "Yes", "groundedness": "Somewhat"}),
            '{"verdicts": ["Yes", "No"]}',
            "oops",
        ]
    )
    grader = LLMGrader(client, "judge")
    assert grader.grade_answer(case(), "In 1911 [1].", ["It was founded in 1911."]) == {
        "completeness": 1.0,
        "groundedness": 0.5,
    }
    assert "[1]" not in client.prompts[0]
    assert grader.grade_citations([("s1", "p1"), ("s2", "p2")]) == 0.5
    assert grader.grade_citations([("s", "p")]) is None  # unparsable reply: no grade, no crash
    assert grader.grade_citations([]) is None


def test_schema_errors():
    assert schema_errors(case()) == []
    assert schema_errors(case(kind="poem"))
    assert schema_errors(case(gold_operations=[{"action": "READ", "document": "elsewhere"}]))
    assert schema_errors(case(kind="unanswerable"))  # has evidence
    assert schema_errors(case(kind="multi_turn"))  # no turns
    broken = case()
    del broken["answer"]
    assert schema_errors(broken)


@pytest.mark.parametrize("name", ["dev.jsonl", "quick.jsonl"])
def test_shipped_case_files_follow_the_schema(name):
    cases = load_cases(CASES / name)
    assert all(set(c) == set(FIELDS) and not schema_errors(c) for c in cases)
    assert len({c["id"] for c in cases}) == len(cases)
    if name == "dev.jsonl":
        assert len(cases) >= 30 and {c["kind"] for c in cases} == set(m.KINDS)


def test_resume_keeps_finished_error_free_cases_graded_the_same_way(tmp_path):
    rows = [
        {"id": "a", "kind": "fact", "metrics": {}},
        {"id": "b", "kind": "fact", "error": "TimeoutError"},
        {"id": "gone", "kind": "fact", "metrics": {}},
    ]
    (tmp_path / "eval_dev.json").write_text(
        json.dumps({"config": {"grader": "llm"}, "cases": rows})
    )
    cases = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    args = SimpleNamespace(out=tmp_path, grader="llm")
    assert [r["id"] for r in resumed("eval_dev", cases, args)] == ["a"]
    assert resumed("eval_other", cases, args) == []
    with pytest.raises(SystemExit, match="graded by 'llm'"):
        resumed("eval_dev", cases, SimpleNamespace(out=tmp_path, grader="heuristic"))
