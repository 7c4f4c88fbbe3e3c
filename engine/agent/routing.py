"""Retrieval routing: check the planner's choice of documents against the session's index.

Why: a small planner reads only titles and LLM-written descriptions, and tends to SEARCH every
document "to be safe". That spends context on distractors and invites answers built from the
wrong file. The index knows better: for each SEARCH, its own query is searched across all the
documents the plan SEARCHes, and each document gets the fused score mass of the top
``route_k`` hits. A SEARCH whose document holds less than ``route_keep_ratio`` of the best
document's mass for that query is dropped — the question's words and meaning live elsewhere.

What it never does: add documents the planner did not choose; touch READ operations; prune a
comparison (the user named several documents on purpose); drop every SEARCH of a plan; act when
the search found nothing (no signal is not evidence). Everything it did goes to the trace.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from engine.agent.config import AgentConfig
from engine.agent.search import search
from engine.agent.types import Operation, Rewrite, SessionView

_COMPARISON = re.compile(
    r"\b(compar\w*|versus|vs\.?|contrast\w*|differ\w*|similar\w*|both|each|all (the )?"
    r"(documents|files|papers|reports|sources)|across|between|which (one|document|file|paper))\b",
    re.IGNORECASE,
)


def is_comparison(rewrite: Rewrite) -> bool:
    return bool(_COMPARISON.search(rewrite.rewritten) or _COMPARISON.search(rewrite.original))


def mass_by_document(hits: Sequence[Any]) -> dict[str, float]:
    """Sum of the (normalised, fused) scores of the hits in each document."""
    mass: dict[str, float] = defaultdict(float)
    for hit in hits:
        mass[hit.doc_id] += hit.score
    return dict(mass)


def keep(mass: dict[str, float], document: str, ratio: float) -> bool:
    best = max(mass.values(), default=0.0)
    return best <= 0.0 or mass.get(document, 0.0) >= ratio * best


async def route(
    view: SessionView, rewrite: Rewrite, operations: Sequence[Operation], config: AgentConfig
) -> tuple[list[Operation], dict[str, Any]]:
    """The operations worth running, and trace info (scores per query, what was dropped)."""
    ops = list(operations)
    searched = list(dict.fromkeys(op.document for op in ops if op.action == "SEARCH"))
    if config.route_keep_ratio <= 0 or len(searched) < 2:
        return ops, {}
    if is_comparison(rewrite):
        return ops, {"skipped": "comparison"}
    queries = list(
        dict.fromkeys(op.query or rewrite.rewritten for op in ops if op.action == "SEARCH")
    )
    results = await asyncio.gather(
        *(search(view, q, searched, config, k=config.route_k) for q in queries)
    )
    masses = {q: mass_by_document(hits) for q, hits in zip(queries, results, strict=True)}
    kept = [
        op
        for op in ops
        if op.action != "SEARCH"
        or keep(masses[op.query or rewrite.rewritten], op.document, config.route_keep_ratio)
    ]
    if not any(op.action == "SEARCH" for op in kept):  # cannot happen (the best doc is kept)
        kept = ops
    trace: dict[str, Any] = {
        "mass": {q: {d: round(m, 3) for d, m in mass.items()} for q, mass in masses.items()}
    }
    if dropped := [asdict(op) for op in ops if op not in kept]:
        trace["dropped"] = dropped
    return kept, trace
