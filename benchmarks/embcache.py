"""Disk cache of embeddings keyed by model and text, so a full SciFact run is paid once.

One SQLite file per model variant (``<cache>/<model>-<variant>.sqlite``) maps the SHA-1 of a text
to its float32 vector. Texts are embedded longest-first in length-sorted batches (little padding)
and committed after every batch, so an interrupted run resumes where it stopped.

``python -m benchmarks.embcache --scifact [--variant int8|fp32 ...]`` fills the cache for the
SciFact corpus and test queries ahead of ``benchmarks.retrieval``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from models import paths

DEFAULT_DIR = Path(os.environ.get("BRIEF_EMBED_CACHE", Path.home() / ".cache/brief/embeddings"))


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """SHA-1(text) → float32 vector for one model variant."""

    def __init__(self, model_key: str, directory: Path = DEFAULT_DIR):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{model_key}.sqlite"
        self.db = sqlite3.connect(self.path, timeout=60)  # other runs may be writing
        self.db.execute("create table if not exists emb (key text primary key, vec blob not null)")
        self.db.commit()

    def get_many(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        keys = list({text_key(t) for t in texts})
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, blob in self.db.execute(
                f"select key, vec from emb where key in ({marks})", chunk
            ):
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        rows = [
            (text_key(t), np.asarray(v, dtype=np.float32).tobytes())
            for t, v in zip(texts, vectors, strict=True)
        ]
        self.db.executemany("insert or replace into emb values (?, ?)", rows)
        self.db.commit()

    def __len__(self) -> int:
        return int(self.db.execute("select count(*) from emb").fetchone()[0])


def embed_cached(
    texts: Sequence[str],
    cache: EmbeddingCache,
    embed: Callable[[Sequence[str]], np.ndarray],
    count_tokens: Callable[[Sequence[str]], list[int]] | None = None,
    batch_tokens: int = 8192,
    max_batch: int = 64,
    progress: bool = True,
) -> np.ndarray:
    """Vectors for ``texts`` in order, embedding only what the cache lacks."""
    have = cache.get_many(texts)
    missing = sorted({t for t in texts if text_key(t) not in have})
    if missing:
        lengths = count_tokens(missing) if count_tokens else [len(t) // 4 for t in missing]
        order = sorted(range(len(missing)), key=lambda i: -lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # Longest first: the first text of a batch fixes its padded width.
            width = lengths[current[0]] if current else lengths[i]
            if current and (len(current) >= max_batch or width * (len(current) + 1) > batch_tokens):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        bar = tqdm(total=len(missing), desc=f"embed {cache.path.stem}", disable=not progress)
        for batch in batches:
            chunk = [missing[i] for i in batch]
            vectors = embed(chunk)
            cache.put_many(chunk, vectors)
            have.update({text_key(t): v for t, v in zip(chunk, vectors, strict=True)})
            bar.update(len(chunk))
        bar.close()
    return np.stack([have[text_key(t)] for t in texts]).astype(np.float32, copy=False)


def onnx_model(variant: str, threads: int | None = None):
    """The served encoder (``int8``) or its fp32 export, loaded from the prepared weights."""
    from engine.encoder.onnx import OnnxEmbeddingModel

    return OnnxEmbeddingModel(
        paths.encoder_onnx_path(), quantized=(variant == "int8"), threads=threads
    )


def model_key(variant: str) -> str:
    return f"{paths.ENCODER_NAME.split('/')[-1]}-onnx-{variant}"


def embed_texts(
    texts: Sequence[str], variant: str, progress: bool = True, directory: Path | None = None
) -> np.ndarray:
    """Cached vectors of ``texts``; the model is loaded only if something is missing."""
    loaded: list = []

    def model():
        if not loaded:
            loaded.append(onnx_model(variant))
        return loaded[0]

    return embed_cached(
        texts,
        EmbeddingCache(model_key(variant), directory or DEFAULT_DIR),
        lambda ts: model().embed(ts),
        count_tokens=lambda ts: [len(t) for t in model().tokenize(ts)],
        progress=progress,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scifact", action="store_true", help="fill the cache for BEIR SciFact")
    parser.add_argument(
        "--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "shared/corpus"
    )
    parser.add_argument("--variant", action="append", choices=["int8", "fp32"])
    parser.add_argument("--limit", type=int, default=None, help="first N corpus documents only")
    args = parser.parse_args(argv)
    if not args.scifact:
        parser.error("nothing to do: pass --scifact")
    from benchmarks.retrieval_data import load_scifact

    data = load_scifact(args.corpus)
    texts = [q for q in data.queries.values()] + [d for d in data.docs.values()][: args.limit]
    for variant in args.variant or ["int8", "fp32"]:
        embed_texts(texts, variant)


if __name__ == "__main__":
    main()
