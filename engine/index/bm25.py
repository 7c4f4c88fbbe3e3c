"""Lexical (BM25) index for one session, rebuilt lazily after additions and removals.

Backend: ``bm25s`` by default, ``rank-bm25`` as an alternative (both behind one class). Measured
here (see the module report in the README): bm25s answers queries one to two orders of magnitude
faster than rank-bm25 at session sizes, while its full (re)index is cheap enough that a lazy
rebuild on the first search after a change beats any incremental bookkeeping. Neither library
supports incremental additions, so texts are tokenised once at ``add`` time and kept; a rebuild
only re-counts tokens.

Scores of the two backends are the same BM25 (Okapi, Lucene-style idf in bm25s). Parameters
default to k1=0.9, b=0.4 (Anserini's BEIR baseline settings).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import numpy as np

from engine.errors import MissingExtra

# A short English stopword list: enough to keep "the"/"of" from dominating short queries,
# short enough not to drop content words.
STOPWORDS = frozenset(
    """a an and are as at be but by for from has have he her his i if in into is it its of on or
    our she so such that the their them then there these they this to was we were what when
    where which who will with you your""".split()
)
_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class BM25Index:
    """BM25 over texts keyed by non-negative int labels."""

    def __init__(self, *, backend: str = "bm25s", k1: float = 0.9, b: float = 0.4):
        if backend not in ("bm25s", "rank_bm25"):
            raise ValueError(f"unknown BM25 backend '{backend}'")
        self.backend = backend
        self.k1, self.b = k1, b
        self._tokens: dict[int, list[str]] = {}
        self._model = None
        self._order = np.zeros(0, dtype=np.int64)  # model row -> label
        self._dirty = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tokens)

    def add(self, labels: Sequence[int], texts: Sequence[str]) -> None:
        tokens = [tokenize(t) for t in texts]
        with self._lock:
            self._tokens.update(zip((int(x) for x in labels), tokens, strict=True))
            self._dirty = True

    def remove(self, labels: Sequence[int]) -> None:
        with self._lock:
            for label in labels:
                self._tokens.pop(int(label), None)
            self._dirty = True

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (labels, scores) with score > 0, best first; ``allowed`` is a boolean array
        indexed by label."""
        q = tokenize(query)
        with self._lock:
            if self._dirty:
                self._rebuild()
            model, order = self._model, self._order
        if not q or model is None or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = np.asarray(self._scores(model, q), dtype=np.float32)
        if allowed is not None:
            ok = order < len(allowed)
            ok[ok] = allowed[order[ok]]
            scores = np.where(ok, scores, 0.0)
        cand = np.flatnonzero(scores > 0)
        if len(cand) > k:
            cand = cand[np.argpartition(-scores[cand], k - 1)[:k]]
        cand = cand[np.argsort(-scores[cand], kind="stable")]
        return order[cand], scores[cand]

    def _scores(self, model, q: list[str]) -> np.ndarray:
        if self.backend == "bm25s":
            # bm25s skips unknown words only when asked; keep the ones in its vocabulary.
            vocab = model.vocab_dict
            q = [t for t in q if t in vocab]
            if not q:
                return np.zeros(len(self._order), dtype=np.float32)
            return model.get_scores(q)
        return model.get_scores(q)

    def _rebuild(self) -> None:
        self._dirty = False
        if not self._tokens:
            self._model, self._order = None, np.zeros(0, dtype=np.int64)
            return
        labels = sorted(self._tokens)
        corpus = [self._tokens[lb] or ["\u2205"] for lb in labels]  # bm25s dislikes empty docs
        self._order = np.asarray(labels, dtype=np.int64)
        if self.backend == "bm25s":
            try:
                import bm25s
            except ImportError as exc:
                raise MissingExtra("bm25s", "bm25s", "index") from exc
            model = bm25s.BM25(k1=self.k1, b=self.b)
            model.index(corpus, show_progress=False)
        else:
            try:
                from rank_bm25 import BM25Okapi
            except ImportError as exc:
                raise MissingExtra("rank_bm25", "rank-bm25", "index") from exc
            model = BM25Okapi(corpus, k1=self.k1, b=self.b)
        self._model = model
