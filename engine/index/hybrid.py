"""Per-session hybrid index: BM25 + dense vectors over the chunks of many documents.

A document is searchable as soon as it is parsed: its chunks go into BM25 at once, and vectors
are added as embedding batches come back, so the dense side covers whatever is embedded so far
(a chunk without a vector simply has no dense rank). Both result lists are fused:

- RRF (reciprocal rank fusion, k=60): only ranks matter, robust to score scales;
- convex: ``alpha * dense + (1 - alpha) * bm25`` after min-max normalising each list over the
  candidates (a missing score counts as 0).

Chunks live in slots (int labels) per level; the BM25 and dense indexes are keyed by slot, and a
removed document's slots are tombstoned. All methods take a lock, so ingestion tasks and searches
can run in different threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import InvalidRequest
from engine.index.bm25 import BM25Index, count_terms
from engine.index.dense import DenseIndex
from engine.ingest.document import Chunk

RRF_K = 60


@dataclass(frozen=True)
class Hit:
    doc_id: str
    chunk: Chunk
    score: float  # fused score (higher is better)
    bm25_score: float | None = None
    bm25_rank: int | None = None  # 1-based
    dense_score: float | None = None  # cosine similarity
    dense_rank: int | None = None  # 1-based


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion of ranked label lists (best first)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, label in enumerate(ranking, start=1):
            fused[label] = fused.get(label, 0.0) + 1.0 / (k + rank)
    return fused


def convex(
    dense: Mapping[int, float], lexical: Mapping[int, float], alpha: float = 0.5
) -> dict[int, float]:
    """``alpha * dense + (1 - alpha) * lexical`` over min-max normalised scores."""

    def norm(scores: Mapping[int, float]) -> dict[int, float]:
        if not scores:
            return {}
        lo, hi = min(scores.values()), max(scores.values())
        span = hi - lo
        return {lb: (s - lo) / span if span > 0 else 1.0 for lb, s in scores.items()}

    d, x = norm(dense), norm(lexical)
    return {lb: alpha * d.get(lb, 0.0) + (1 - alpha) * x.get(lb, 0.0) for lb in d.keys() | x.keys()}


class _Level:
    """Chunks of one granularity with their BM25 and dense indexes."""

    def __init__(self, dim: int, bm25_backend: str, dense_backend: str, hnsw_threshold: int):
        self.chunks: list[Chunk | None] = []
        self.embedded = np.zeros(0, dtype=bool)
        self.slot: dict[str, int] = {}  # chunk key -> label
        self.bm25 = BM25Index(backend=bm25_backend)
        self.dense = DenseIndex(dim, backend=dense_backend, hnsw_threshold=hnsw_threshold)

    def add(self, chunks: Sequence[Chunk], counted: Sequence[Counter[str]]) -> list[int]:
        labels = list(range(len(self.chunks), len(self.chunks) + len(chunks)))
        self.chunks.extend(chunks)
        self.embedded = np.concatenate([self.embedded, np.zeros(len(chunks), dtype=bool)])
        self.slot.update((c.key, lb) for c, lb in zip(chunks, labels, strict=True))
        self.bm25.add_counted(labels, counted)
        return labels

    def remove(self, labels: Sequence[int]) -> None:
        for lb in labels:
            chunk = self.chunks[lb]
            if chunk is not None:
                self.slot.pop(chunk.key, None)
                self.chunks[lb] = None
        self.embedded[list(labels)] = False
        self.bm25.remove(labels)
        self.dense.remove(labels)


class SessionIndex:
    """Chunks of every document of one session, searchable by BM25, vectors, or both."""

    def __init__(
        self,
        dim: int = 768,
        *,
        fusion: str = "rrf",
        alpha: float = 0.5,
        bm25_backend: str = "incremental",
        dense_backend: str = "auto",
        hnsw_threshold: int = 20000,
    ):
        self.dim, self.fusion, self.alpha = dim, fusion, alpha
        self._args = (dim, bm25_backend, dense_backend, hnsw_threshold)
        self._levels: dict[str, _Level] = {}
        self._docs: dict[str, dict[str, list[int]]] = {}  # doc -> level -> labels
        self._lock = threading.RLock()

    # --- documents ---
    def add_document(self, doc_id: str, chunks: Mapping[str, Sequence[Chunk]]) -> None:
        """Add a document's chunks (all levels); searchable by BM25 at once. Tokenising runs
        before taking the lock, so searches are not held up by a large document."""
        counted = {name: count_terms([c.text for c in cs]) for name, cs in chunks.items()}
        with self._lock:
            if doc_id in self._docs:
                self.remove_document(doc_id)
            self._docs[doc_id] = {
                name: self._level(name).add(list(level_chunks), counted[name])
                for name, level_chunks in chunks.items()
            }

    def remove_document(self, doc_id: str) -> bool:
        with self._lock:
            levels = self._docs.pop(doc_id, None)
            if levels is None:
                return False
            for name, labels in levels.items():
                self._levels[name].remove(labels)
            return True

    def documents(self) -> list[str]:
        with self._lock:
            return list(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    # --- vectors ---
    def add_vectors(self, chunks: Sequence[Chunk | str], vectors: np.ndarray) -> int:
        """Attach vectors to chunks (objects or keys). Chunks of a document removed meanwhile are
        skipped; returns how many vectors were added."""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(chunks), self.dim)
        with self._lock:
            by_level: dict[str, tuple[list[int], list[int]]] = {}
            for i, c in enumerate(chunks):
                key = c if isinstance(c, str) else c.key
                level_name = key.rsplit(":", 2)[-2]
                level = self._levels.get(level_name)
                label = level.slot.get(key) if level else None
                if label is not None:
                    labels, rows = by_level.setdefault(level_name, ([], []))
                    labels.append(label)
                    rows.append(i)
            for name, (labels, rows) in by_level.items():
                level = self._levels[name]
                level.dense.add(labels, vectors[rows])
                level.embedded[labels] = True
            return sum(len(lb) for lb, _ in by_level.values())

    def unembedded(self, doc_id: str | None = None, level: str | None = None) -> list[Chunk]:
        with self._lock:
            out: list[Chunk] = []
            for name, lev in self._levels.items():
                if level is not None and name != level:
                    continue
                labels = (
                    self._docs.get(doc_id, {}).get(name, [])
                    if doc_id is not None
                    else range(len(lev.chunks))
                )
                out.extend(
                    c for lb in labels if (c := lev.chunks[lb]) is not None and not lev.embedded[lb]
                )
            return out

    # --- chunk access ---
    def chunk(self, doc_id: str, level: str, index: int) -> Chunk | None:
        """Chunk ``index`` of a document, e.g. a hit's neighbour (index ± 1); None if absent."""
        with self._lock:
            lev = self._levels.get(level)
            label = lev.slot.get(f"{doc_id}:{level}:{index}") if lev else None
            return None if label is None else lev.chunks[label]

    def chunks(self, doc_id: str, level: str) -> list[Chunk]:
        with self._lock:
            lev = self._levels.get(level)
            labels = self._docs.get(doc_id, {}).get(level, [])
            return [lev.chunks[lb] for lb in labels] if lev else []

    def vector(self, chunk: Chunk | str) -> np.ndarray | None:
        """A copy of a chunk's vector (object or key), or None while it is not embedded; the
        agent's semantic window searches with it."""
        key = chunk if isinstance(chunk, str) else chunk.key
        with self._lock:
            lev = self._levels.get(key.rsplit(":", 2)[-2])
            label = lev.slot.get(key) if lev else None
            vec = None if label is None else lev.dense.vector(label)
            return None if vec is None else vec.copy()

    def stats(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {
                name: {"chunks": len(lev.slot), "embedded": int(lev.embedded.sum())}
                for name, lev in self._levels.items()
            }

    # --- search ---
    def search(
        self,
        query: str,
        query_vector: np.ndarray | None = None,
        k: int = 10,
        doc_ids: Iterable[str] | None = None,
        level: str = "small",
        *,
        fusion: str | None = None,
        alpha: float | None = None,
        candidates: int | None = None,
    ) -> list[Hit]:
        """Top-k chunks of ``level``, fused from BM25 and (when a query vector is given) the
        embedded chunks; ``doc_ids`` restricts the search to those documents."""
        fusion = fusion or self.fusion
        if fusion not in ("rrf", "convex"):
            raise InvalidRequest(f"unknown fusion '{fusion}'", param="fusion")
        alpha = self.alpha if alpha is None else alpha
        n_cand = max(k, candidates or 4 * k, 50)
        with self._lock:
            lev = self._levels.get(level)
            if lev is None or k <= 0:
                return []
            allowed = None
            if doc_ids is not None:
                allowed = np.zeros(len(lev.chunks), dtype=bool)
                for d in doc_ids:
                    allowed[self._docs.get(d, {}).get(level, [])] = True
            b_labels, b_scores = lev.bm25.search(query, n_cand, allowed)
            d_labels = d_scores = np.zeros(0)
            if query_vector is not None and len(lev.dense):
                d_labels, d_scores = lev.dense.search(query_vector, n_cand, allowed)
            bm = {
                int(lb): (float(s), r)
                for r, (lb, s) in enumerate(zip(b_labels, b_scores, strict=True), 1)
            }
            de = {
                int(lb): (float(s), r)
                for r, (lb, s) in enumerate(zip(d_labels, d_scores, strict=True), 1)
            }
            if fusion == "rrf":
                fused = rrf([list(bm), list(de)])
            else:
                fused = convex(
                    {lb: s for lb, (s, _) in de.items()},
                    {lb: s for lb, (s, _) in bm.items()},
                    alpha,
                )
            best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            hits = []
            for lb, score in best:
                chunk = lev.chunks[lb]
                b, d = bm.get(lb), de.get(lb)
                hits.append(
                    Hit(
                        chunk.doc_id,
                        chunk,
                        score,
                        b[0] if b else None,
                        b[1] if b else None,
                        d[0] if d else None,
                        d[1] if d else None,
                    )
                )
            return hits

    def _level(self, name: str) -> _Level:
        if name not in self._levels:
            self._levels[name] = _Level(*self._args)
        return self._levels[name]
