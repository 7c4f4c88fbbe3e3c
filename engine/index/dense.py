"""Dense vector index for one session: exact numpy search, with hnswlib above a size threshold.

Why both: a session holds a few documents, i.e. hundreds to a few thousand chunks, where one
matrix-vector product is exact, about as fast as an HNSW query, and inserting costs nothing,
while HNSW insertion costs 0.6-4 ms per vector here (time taken from the encoder and from
time-to-queryable). Measured on this 2-core machine under load (768-d, k=10):

==========  =====================  ==============  ==========================
vectors     exact query p50/p90    hnsw query p50  hnsw insert (M=16, efc=100)
==========  =====================  ==============  ==========================
1,000       0.23 / 0.34 ms         0.16 ms         0.6 s total
5,000       1.6 / 5.7 ms           0.8 ms          10 s total
20,000      15 / 19 ms             1.1 ms          73 s total
==========  =====================  ==============  ==========================

So the index is exact up to ``hnsw_threshold`` (20,000) vectors; above it an hnswlib cosine
index is built from the stored vectors and kept up to date (``backend="hnsw"`` forces it from
the start, ``"exact"`` never builds it). Vectors stay in numpy in every mode, so a rebuild or an
exact re-ranking is always possible, and a filter that leaves few vectors is searched exactly.

Labels are non-negative ints chosen by the caller (the session index uses its chunk slots).
Vectors must be L2-normalised float32 (the Encoder contract), so cosine = dot product.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.errors import MissingExtra

EXACT_SUBSET_MAX = 8192  # a filter that leaves at most this many vectors is searched exactly


class DenseIndex:
    """Add, remove (tombstones) and top-k cosine search, optionally restricted by a label mask."""

    def __init__(
        self,
        dim: int = 768,
        *,
        backend: str = "auto",  # "auto" | "exact" | "hnsw"
        hnsw_threshold: int = 20000,
        m: int = 16,
        ef_construction: int = 100,
        ef_search: int = 64,
    ):
        if backend not in ("auto", "exact", "hnsw"):
            raise ValueError(f"unknown dense backend '{backend}'")
        self.dim = dim
        self.backend = backend
        self.hnsw_threshold = 0 if backend == "hnsw" else hnsw_threshold
        self._m, self._efc, self._efs = m, ef_construction, ef_search
        self._vecs = np.zeros((0, dim), dtype=np.float32)
        self._labels = np.zeros(0, dtype=np.int64)
        self._alive = np.zeros(0, dtype=bool)
        self._n = 0  # rows used
        self._row: dict[int, int] = {}
        self._hnsw = None

    def __len__(self) -> int:
        return len(self._row)

    @property
    def uses_hnsw(self) -> bool:
        return self._hnsw is not None

    def add(self, labels: Sequence[int], vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        labels = np.asarray(labels, dtype=np.int64)
        if len(labels) != len(vectors):
            raise ValueError("labels and vectors differ in length")
        if any(int(lb) in self._row for lb in labels):
            self.remove([int(lb) for lb in labels if int(lb) in self._row])
        self._grow(self._n + len(labels))
        rows = np.arange(self._n, self._n + len(labels))
        self._vecs[rows] = vectors
        self._labels[rows] = labels
        self._alive[rows] = True
        self._row.update(zip(labels.tolist(), rows.tolist(), strict=True))
        self._n += len(labels)
        if self._hnsw is not None:
            self._hnsw_add(labels, vectors)
        elif self.backend != "exact" and len(self._row) >= self.hnsw_threshold:
            self._build_hnsw()

    def remove(self, labels: Sequence[int]) -> None:
        for label in labels:
            row = self._row.pop(int(label), None)
            if row is None:
                continue
            self._alive[row] = False
            if self._hnsw is not None:
                self._hnsw.mark_deleted(int(label))
        if self._n > 1024 and len(self._row) < self._n // 2:
            self._compact()

    def vector(self, label: int) -> np.ndarray | None:
        row = self._row.get(label)
        return None if row is None else self._vecs[row]

    def search(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (labels, cosine scores), best first. ``allowed`` is a boolean array indexed by
        label (labels beyond its end are not allowed)."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if k <= 0 or not self._row:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows = None
        if allowed is not None:
            labels = self._labels[: self._n]
            ok = self._alive[: self._n] & (labels < len(allowed))
            ok[ok] = allowed[labels[ok]]
            rows = np.flatnonzero(ok)
            if self._hnsw is None or len(rows) <= EXACT_SUBSET_MAX:
                return self._exact(q, k, rows)
        if self._hnsw is None:
            return self._exact(q, k, np.flatnonzero(self._alive[: self._n]))
        return self._hnsw_search(q, k, allowed, len(rows) if rows is not None else len(self._row))

    # --- exact ---
    def _exact(self, q: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(rows) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # einsum, not BLAS: a multi-threaded sgemv on a small matrix spends more time waking
        # threads than computing when cores are busy (measured 16 ms vs 0.2 ms at 1k vectors).
        mat = self._vecs[: self._n] if len(rows) == self._n else self._vecs[rows]
        scores = np.einsum("ij,j->i", mat, q)
        k = min(k, len(rows))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(rows) else np.arange(len(rows))
        top = top[np.argsort(-scores[top], kind="stable")]
        return self._labels[rows[top]], scores[top]

    def _grow(self, need: int) -> None:
        cap = len(self._vecs)
        if need <= cap:
            return
        new_cap = max(need, cap * 2, 256)
        for name in ("_vecs", "_labels", "_alive"):
            old = getattr(self, name)
            new = np.zeros((new_cap, *old.shape[1:]), dtype=old.dtype)
            new[: self._n] = old[: self._n]
            setattr(self, name, new)

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: self._n])
        n = len(keep)
        self._vecs[:n] = self._vecs[keep]
        self._labels[:n] = self._labels[keep]
        self._alive[:n] = True
        self._alive[n : self._n] = False
        self._n = n
        self._row = dict(zip(self._labels[:n].tolist(), range(n), strict=True))

    # --- hnsw ---
    def _build_hnsw(self) -> None:
        try:
            import hnswlib
        except ImportError as exc:
            raise MissingExtra("hnsw", "hnswlib", "index") from exc
        index = hnswlib.Index(space="cosine", dim=self.dim)
        cap = max(1024, 2 * len(self._row))
        index.init_index(
            max_elements=cap, M=self._m, ef_construction=self._efc, allow_replace_deleted=True
        )
        index.set_ef(self._efs)
        self._hnsw = index
        self._compact()
        if self._n:
            index.add_items(self._vecs[: self._n], self._labels[: self._n])

    def _hnsw_add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        index = self._hnsw
        need = index.get_current_count() + len(labels)
        if need > index.get_max_elements():
            index.resize_index(max(need, 2 * index.get_max_elements()))
        index.add_items(vectors, labels, replace_deleted=True)

    def _hnsw_search(
        self, q: np.ndarray, k: int, allowed: np.ndarray | None, available: int
    ) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, available)
        if k == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        filt = None
        if allowed is not None:
            n_allowed = len(allowed)

            def filt(label: int) -> bool:
                return label < n_allowed and bool(allowed[label])

        self._hnsw.set_ef(max(self._efs, k))
        try:
            labels, dist = self._hnsw.knn_query(q, k=k, filter=filt)
        except RuntimeError:
            # Fewer reachable candidates than k (deletions, a strict filter): search exactly.
            ok = self._alive[: self._n].copy()
            if allowed is not None:
                lab = self._labels[: self._n]
                ok &= lab < len(allowed)
                ok[ok] = allowed[lab[ok]]
            return self._exact(q, k, np.flatnonzero(ok))
        return labels[0].astype(np.int64), (1.0 - dist[0]).astype(np.float32)
