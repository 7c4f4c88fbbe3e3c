"""Metrics of the evaluation harness (``benchmarks.eval``): pure functions over one case's
gold data and what the server returned, so each is unit-tested with fakes.

Inputs are plain data: a case dict (the format of ``benchmarks/cases/*.jsonl``), operations as
``(action, case path)`` pairs (file ids already mapped back to corpus paths), retrieved
paragraphs as ``Para`` rows, and annotations as returned by the server. A metric that does not
apply to a case (precision of an empty plan, evidence recall of an unanswerable case) is
``None``, and aggregates skip ``None`` rather than count it as 0 or 1.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.agent.citations import support

KINDS = ("fact", "table", "compare", "summary", "multi_turn", "unanswerable")
GRADE = {"yes": 1.0, "somewhat": 0.5, "no": 0.0}
_MARKERS = re.compile(r"\s*\[\d+(?:\s*[-,]\s*\d+)*\]")
_REFUSAL = re.compile(
    r"(does not|doesn't|do not|don't|did not|didn't)\s+(say|mention|provide|contain|specify|"
    r"include|state|report|give|list|name|discuss|cover|appear)"
    r"|\bnot\s+(mentioned|provided|specified|stated|available|found|given|reported|included|"
    r"listed|named|discussed|covered)"
    r"|\bno (information|mention|data|details?|record)\b"
    r"|\b(cannot|can ?not|can't|unable to|could not|couldn't)\s+(find|answer|determine|provide|"
    r"locate|be determined|be found|tell)"
    r"|\bi don'?t know\b|not enough information|insufficient (information|context)"
    r"|\bthere is no\b",
    re.IGNORECASE,
)


def norm(text: str) -> str:
    """NFKC, lower case, whitespace collapsed: how quotes are matched against paragraphs
    (PDF text breaks lines and spaces unpredictably; NFKC folds ligatures and sub/superscripts)."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def contains(haystack: str, needle: str) -> bool:
    return bool(needle.strip()) and norm(needle) in norm(haystack)


def strip_markers(text: str) -> str:
    return _MARKERS.sub("", text)


# --- planner -------------------------------------------------------------------------------
def planner_metrics(
    gold: Sequence[dict[str, Any]], predicted: Sequence[tuple[str, str]]
) -> dict[str, float | None]:
    """Action accuracy: the plan uses exactly the gold set of actions (SEARCH vs READ — the
    choice that decides between a focused answer and a map-reduce summary). Resource precision
    and recall: the documents the plan touches against the gold documents. ``op_recall``: gold
    (action, document) pairs found in the plan."""
    gold_pairs = {(g["action"], g["document"]) for g in gold}
    pred_pairs = set(predicted)
    gold_docs = {d for _, d in gold_pairs}
    pred_docs = {d for _, d in pred_pairs}
    hit = len(gold_docs & pred_docs)
    return {
        "action_accuracy": float({a for a, _ in gold_pairs} == {a for a, _ in pred_pairs}),
        "resource_precision": hit / len(pred_docs) if pred_docs else None,
        "resource_recall": hit / len(gold_docs) if gold_docs else None,
        "op_recall": len(gold_pairs & pred_pairs) / len(gold_pairs) if gold_pairs else None,
        "n_operations": float(len(predicted)),
    }


# --- retrieval -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Para:
    """A retrieved (or cited) paragraph with its text, mapped back to the case's path."""

    document: str
    paragraph: int
    score: float
    text: str
    page: int | None = None


def rank(paras: Iterable[Para]) -> list[Para]:
    """Each paragraph once (best score), best first; ties keep retrieval order."""
    best: dict[tuple[str, int], Para] = {}
    for p in paras:
        key = (p.document, p.paragraph)
        if key not in best or p.score > best[key].score:
            best[key] = p
    order = {k: i for i, k in enumerate(best)}
    return sorted(best.values(), key=lambda p: (-p.score, order[(p.document, p.paragraph)]))


def evidence_found(ev: dict[str, Any], paras: Sequence[Para]) -> Para | None:
    """The first paragraph of the gold document that contains the gold quote."""
    return next(
        (p for p in paras if p.document == ev["document"] and contains(p.text, ev["quote"])), None
    )


def retrieval_metrics(
    evidence: Sequence[dict[str, Any]], ranked: Sequence[Para], ks: Sequence[int]
) -> dict[str, float | None]:
    """Evidence recall@k (gold quotes inside a top-k paragraph), precision@k (top-k paragraphs
    that hold some gold quote, over min(k, retrieved)), recall over everything retrieved, and
    whether a found quote sits on the gold page (only where the gold page is known)."""
    out: dict[str, float | None] = {}
    for k in ks:
        top = ranked[:k]
        if not evidence:
            out[f"recall@{k}"] = out[f"precision@{k}"] = None
            continue
        out[f"recall@{k}"] = sum(evidence_found(e, top) is not None for e in evidence) / len(
            evidence
        )
        useful = sum(any(evidence_found(e, [p]) for e in evidence) for p in top)
        out[f"precision@{k}"] = useful / len(top) if top else 0.0
    found = [(e, evidence_found(e, ranked)) for e in evidence]
    out["recall@all"] = sum(p is not None for _, p in found) / len(found) if found else None
    paged = [(e, p) for e, p in found if p is not None and e.get("page") is not None]
    out["page_match"] = sum(p.page == e["page"] for e, p in paged) / len(paged) if paged else None
    out["n_retrieved"] = float(len(ranked))
    return out


# --- citations -----------------------------------------------------------------------------
def cited_sentence(text: str, index: int) -> str:
    """The sentence an annotation belongs to: markers are placed just before the sentence's
    final punctuation, so the sentence runs from the previous sentence end to ``index``."""
    head = strip_markers(text[:index]).rstrip()
    starts = [m.end() for m in re.finditer(r"[.!?…]\s+|\n", head)]
    return head[starts[-1] if starts else 0 :].strip()


def citation_metrics(
    answer: str,
    citations: Sequence[tuple[int, str, str]],
    evidence: Sequence[dict[str, Any]],
    cited: Sequence[Para],
    threshold: float,
) -> dict[str, float | None]:
    """``citations``: (index in the answer, cited document path, cited paragraphs' full text).
    Correctness: the n-gram support (engine.agent.citations.support) of the sentence by its
    paragraphs reaches ``threshold`` — the server applies the same check before it emits a
    citation, so this mostly guards against regressions and text/offset mismatches. Recall:
    gold quotes that sit in a cited paragraph."""
    supports = [support(cited_sentence(answer, i), text) for i, _, text in citations]
    return {
        "citation_correct": (sum(s >= threshold for s in supports) / len(supports))
        if supports
        else None,
        "citation_support": statistics.fmean(supports) if supports else None,
        "citation_recall": (
            sum(evidence_found(e, cited) is not None for e in evidence) / len(evidence)
        )
        if evidence
        else None,
        "n_citations": float(len(citations)),
    }


# --- answers -------------------------------------------------------------------------------
def keyword_accuracy(answer: str, keywords: Sequence[str]) -> float | None:
    if not keywords:
        return None
    text = strip_markers(answer)
    return sum(contains(text, k) for k in keywords) / len(keywords)


def abstained(answer: str) -> bool:
    return bool(_REFUSAL.search(strip_markers(answer)))


def grade_value(label: Any) -> float | None:
    """Yes / Somewhat / No (any case, surrounding punctuation ignored) → 1 / 0.5 / 0."""
    if not isinstance(label, str):
        return None
    return GRADE.get(label.strip().strip(".!\"'").lower())


# --- aggregation ---------------------------------------------------------------------------
def mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.fmean(vals) if vals else None


def percentile(values: Sequence[float], q: float) -> float | None:
    vals = sorted(values)
    if not vals:
        return None
    pos = (len(vals) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean of every numeric metric (``None`` skipped) overall and per kind; latency median and
    P90 per stage. Rows carry ``kind``, ``metrics`` and ``timings``."""

    def summarize(subset: Sequence[dict[str, Any]]) -> dict[str, Any]:
        keys = dict.fromkeys(k for r in subset for k in r.get("metrics", {}))
        out: dict[str, Any] = {"n": len(subset)}
        out |= {k: mean(r["metrics"].get(k) for r in subset) for k in keys}
        stages = dict.fromkeys(k for r in subset for k in r.get("timings", {}))
        out["latency"] = {
            s: {
                "median": percentile([r["timings"][s] for r in subset if s in r["timings"]], 0.5),
                "p90": percentile([r["timings"][s] for r in subset if s in r["timings"]], 0.9),
            }
            for s in stages
        }
        return out

    ok = [r for r in rows if not r.get("error")]
    by_kind = {k: summarize([r for r in ok if r["kind"] == k]) for k in KINDS}
    return {
        "overall": summarize(ok),
        "by_kind": {k: v for k, v in by_kind.items() if v["n"]},
        "errors": len(rows) - len(ok),
    }
