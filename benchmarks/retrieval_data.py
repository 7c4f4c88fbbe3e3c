"""BEIR SciFact as plain dicts, a small seeded subset of it, and the BEIR ranking metrics.

The corpus texts are title + text, as BEIR/MTEB embed them. The metrics follow BEIR (which
calls pytrec_eval, i.e. trec_eval): nDCG@k with the judged grade as linear gain and the ideal
ranking built from all judged documents; recall@k = relevant retrieved in the top k / all
relevant. Unlike pytrec_eval, a judged query with an empty ranking counts as 0 instead of being
dropped, so a method cannot gain by answering nothing.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SCIFACT = Path("retrieval") / "beir_scifact"


@dataclass
class RetrievalData:
    docs: dict[str, str]  # doc id -> "title text"
    queries: dict[str, str]  # query id -> text (only queries with judgements)
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade}


def load_scifact(corpus: Path, split: str = "test") -> RetrievalData:
    root = Path(corpus) / SCIFACT
    docs: dict[str, str] = {}
    with (root / "corpus.jsonl").open() as fh:
        for line in fh:
            row = json.loads(line)
            docs[str(row["_id"])] = f"{row.get('title', '')} {row['text']}".strip()
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open() as fh:
        next(fh)
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    queries: dict[str, str] = {}
    with (root / "queries.jsonl").open() as fh:
        for line in fh:
            row = json.loads(line)
            if str(row["_id"]) in qrels:
                queries[str(row["_id"])] = row["text"]
    return RetrievalData(docs=docs, queries=queries, qrels=qrels)


def subset(
    data: RetrievalData,
    n_queries: int,
    n_distractors: int,
    seed: int = 13,
    max_words: int | None = None,
) -> RetrievalData:
    """``n_queries`` random queries, their judged documents and ``n_distractors`` random other
    documents (fixed seed), texts optionally cut to ``max_words``: a pool small enough to embed
    in a minute or two, yet with a real ranking problem."""
    rng = random.Random(seed)
    qids = sorted(rng.sample(sorted(data.queries), min(n_queries, len(data.queries))))
    judged = {d for q in qids for d in data.qrels[q] if d in data.docs}
    others = sorted(set(data.docs) - judged)
    pool = judged | set(rng.sample(others, min(n_distractors, len(others))))

    def cut(text: str) -> str:
        return " ".join(text.split()[:max_words]) if max_words else text

    return RetrievalData(
        docs={d: cut(t) for d, t in data.docs.items() if d in pool},
        queries={q: data.queries[q] for q in qids},
        qrels={q: dict(data.qrels[q]) for q in qids},
    )


def ndcg_at_k(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gain (trec_eval's ``ndcg_cut``); 0 when nothing is relevant."""
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg == 0:
        return 0.0
    dcg = sum(max(judged.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    return dcg / idcg


def recall_at_k(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Share of the relevant (grade > 0) documents found in the top k."""
    relevant = {d for d, g in judged.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def evaluate(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    ndcg_ks: Sequence[int] = (10,),
    recall_ks: Sequence[int] = (10, 100),
) -> dict[str, float]:
    """Mean metrics over every judged query (``run`` maps query id -> doc ids, best first)."""
    out: dict[str, float] = {}
    n = max(len(qrels), 1)
    for k in ndcg_ks:
        out[f"ndcg@{k}"] = sum(ndcg_at_k(run.get(q, []), j, k) for q, j in qrels.items()) / n
    for k in recall_ks:
        out[f"recall@{k}"] = sum(recall_at_k(run.get(q, []), j, k) for q, j in qrels.items()) / n
    return out
