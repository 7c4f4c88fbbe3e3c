"""Map-reduce generation over labelled evidence: splitter → mappers (parallel) → reducer.

Why it looks like this:

* The splitter is a generator: each split is yielded as soon as its token budget (counted with the
  model's own tokenizer, ``llm.count_tokens``) is full, so its mapper starts while later splits
  are still being cut. A paragraph larger than the whole budget is truncated, never dropped, and
  the truncation is recorded.
* A cap on splits bounds the cost. Two strategies: ``stop`` (take paragraphs in order until the
  cap) and ``skip_similar`` (also skip paragraphs whose word-3-gram Jaccard with a paragraph
  already taken is ≥ ``similar_threshold``, so near-duplicates do not spend the budget and the
  cap reaches further). Whatever the cap leaves out is listed in the trace.
* When everything fits one split, one streamed call answers directly. Otherwise one mapper per
  split (under ``asyncio.Semaphore(mapper_concurrency)``) extracts the relevant facts with their
  ``[label]`` markers, labels a mapper did not see are removed, and the reducer gets the notes
  tagged by split, with each split's documents, kinds and label ranges, and streams the answer.
* ``generate`` yields raw text with the model's ``[label]`` markers; the pipeline renumbers and
  resolves them (citations). Closing the generator cancels any mapper still running.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.agent.config import AgentConfig
from engine.agent.prompts import load
from engine.agent.prompts import render as r
from engine.agent.types import DocumentInfo, Evidence, Operation, Rewrite
from engine.llm.base import LLM, ChatMessage, SamplingParams, complete

Labelled = Sequence[tuple[int, Evidence]]
NOT_FOUND = "The documents in this session do not contain information to answer this question."
MIN_BUDGET = 16
_MARKER = re.compile(r"[ \t]*\[(\d+(?:\s*[-–,]\s*\d+)*)\]")
_PARTIAL_MARKER = re.compile(r"\s*\[[\d\s,–-]*$")
_TOKEN = re.compile(r"\w+")


@dataclass
class Split:
    """Consecutive labelled paragraphs whose rendered text costs ``tokens`` ≤ the budget."""

    index: int
    items: list[tuple[int, Evidence]]
    text: str  # the rendered paragraphs, as the model sees them
    tokens: int
    truncated: list[int] = field(default_factory=list)  # labels cut to fit the budget

    @property
    def labels(self) -> set[int]:
        return {label for label, _ in self.items}

    def runs(self) -> list[tuple[str, int, int]]:
        """(doc_id, first label, last label) of each run of consecutive labels of one document."""
        out: list[tuple[str, int, int]] = []
        for label, ev in self.items:
            if out and out[-1][0] == ev.doc_id and out[-1][2] == label - 1:
                out[-1] = (ev.doc_id, out[-1][1], label)
            else:
                out.append((ev.doc_id, label, label))
        return out

    def trace(self) -> dict[str, Any]:
        paragraphs: dict[str, list[int]] = {}
        for _, ev in self.items:
            paragraphs.setdefault(ev.doc_id, []).append(ev.paragraph.id)
        return {
            "index": self.index,
            "tokens": self.tokens,
            "labels": [[first, last] for _, first, last in self.runs()],
            "paragraphs": paragraphs,
            "truncated": self.truncated,
        }


def label_ranges(labels: Sequence[int]) -> list[list[int]]:
    """[1, 2, 3, 7] → [[1, 3], [7, 7]]: compact enough for a trace of a 5,000-paragraph READ."""
    out: list[list[int]] = []
    for label in labels:
        if out and label == out[-1][1] + 1:
            out[-1][1] = label
        else:
            out.append([label, label])
    return out


def shingles(text: str, n: int = 3) -> frozenset[tuple[str, ...]]:
    words = _TOKEN.findall(text.lower())
    if len(words) < n:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


class _SimilarityIndex:
    """Max Jaccard of a text's shingles against every text added so far (inverted index)."""

    def __init__(self) -> None:
        self._posting: dict[tuple[str, ...], list[int]] = {}
        self._sizes: list[int] = []

    def max_jaccard(self, grams: frozenset[tuple[str, ...]]) -> float:
        if not grams:
            return 0.0
        overlap = Counter(i for g in grams for i in self._posting.get(g, ()))
        return max(
            (inter / (len(grams) + self._sizes[i] - inter) for i, inter in overlap.items()),
            default=0.0,
        )

    def add(self, grams: frozenset[tuple[str, ...]]) -> None:
        for g in grams:
            self._posting.setdefault(g, []).append(len(self._sizes))
        self._sizes.append(len(grams))


class Splitter:
    """Iterate to get splits; afterwards ``skipped``/``dropped``/``truncated`` say what was cut."""

    def __init__(
        self,
        labelled: Labelled,
        budget: int,
        count_tokens: Callable[[str], int],
        max_splits: int,
        strategy: Literal["stop", "skip_similar"] = "stop",
        similar_threshold: float = 0.6,
        docs: Sequence[DocumentInfo] = (),
    ):
        if budget < MIN_BUDGET:
            raise ValueError(f"split budget must be at least {MIN_BUDGET} tokens, not {budget}")
        if strategy not in ("stop", "skip_similar"):
            raise ValueError(f"unknown truncation strategy {strategy!r}")
        self.labelled, self.budget, self.count = labelled, budget, count_tokens
        self.max_splits = max(1, max_splits)
        self.strategy, self.threshold = strategy, similar_threshold
        self.docs = {d.doc_id: d for d in docs}
        self.names = r.handles(docs)
        self.skipped: list[int] = []  # near-duplicates (skip_similar)
        self.dropped: list[int] = []  # beyond the cap
        self.truncated: list[int] = []

    def report(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "max_splits": self.max_splits,
            "strategy": self.strategy,
            "skipped_similar": self.skipped,
            "dropped_at_cap": {"count": len(self.dropped), "labels": label_ranges(self.dropped)},
            "truncated": self.truncated,
        }

    def _header(self, ev: Evidence) -> str:
        name = self.names.get(ev.doc_id, "D?")
        return r.doc_header(name, self.docs.get(ev.doc_id), ev.paragraph.page, ev.doc_id)

    def _fit(self, label: int, text: str, room: int) -> tuple[str, int]:
        """The longest word prefix of the paragraph whose line costs ≤ ``room`` tokens."""
        words = text.split()
        lo, hi = 0, len(words) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(r.paragraph_line(label, " ".join(words[:mid]), cut=True)) <= room:
                lo = mid
            else:
                hi = mid - 1
        line = r.paragraph_line(label, " ".join(words[:lo]), cut=True)
        return line, self.count(line)

    def __iter__(self) -> Iterator[Split]:
        """Split ``tokens`` is the sum of each rendered line's count (headers included)."""
        self.skipped, self.dropped, self.truncated = [], [], []
        similar = _SimilarityIndex()
        parts: list[str] = []
        items: list[tuple[int, Evidence]] = []
        cut: list[int] = []
        used, key, made = 0, None, 0
        for pos, (label, ev) in enumerate(self.labelled):
            grams = shingles(ev.paragraph.text) if self.strategy == "skip_similar" else frozenset()
            if grams and similar.max_jaccard(grams) >= self.threshold:
                self.skipped.append(label)
                continue
            new_key = (ev.doc_id, ev.paragraph.page)
            header = self._header(ev) if new_key != key else ""
            line = r.paragraph_line(label, ev.paragraph.text)
            cost = (self.count(header) if header else 0) + self.count(line)
            if items and used + cost > self.budget:
                yield Split(made, items, "".join(parts), used, cut)
                made += 1
                parts, items, cut, used, key = [], [], [], 0, None
                if made >= self.max_splits:
                    self.dropped = [lab for lab, _ in self.labelled[pos:]]
                    return
                header = self._header(ev)
                cost = self.count(header) + self.count(line)
            if cost > self.budget:  # one paragraph larger than a whole split: cut it down
                head_cost = self.count(header)
                if head_cost + self.count(r.paragraph_line(label, "", cut=True)) > self.budget:
                    header, head_cost = "", 0  # a tiny budget: the label alone must fit
                line, line_cost = self._fit(label, ev.paragraph.text, self.budget - head_cost)
                cost = head_cost + line_cost
                cut.append(label)
                self.truncated.append(label)
            parts += [header, line]
            items.append((label, ev))
            used += cost
            key = new_key
            if grams:
                similar.add(grams)
        if items:
            yield Split(made, items, "".join(parts), used, cut)


def splitter(
    labelled: Labelled,
    budget: int,
    count_tokens: Callable[[str], int],
    max_splits: int,
    strategy: Literal["stop", "skip_similar"] = "stop",
    similar_threshold: float = 0.6,
    docs: Sequence[DocumentInfo] = (),
) -> Splitter:
    """Splits of ``labelled`` evidence (label order) under ``budget`` tokens each, lazily."""
    return Splitter(labelled, budget, count_tokens, max_splits, strategy, similar_threshold, docs)


def keep_known_labels(text: str, allowed: set[int]) -> tuple[str, list[int]]:
    """Remove labels the model did not see (invented); returns the text and the removed labels."""
    invented: list[int] = []

    def fix(m: re.Match[str]) -> str:
        numbers = [int(n) for n in re.findall(r"\d+", m.group(1))]
        if "-" in m.group(1) or "–" in m.group(1):
            lo, hi = min(numbers), max(numbers)
            numbers = list(range(lo, hi + 1)) if hi - lo < 200 else numbers
        bad = [n for n in numbers if n not in allowed]
        if not bad:
            return m.group(0)
        invented.extend(bad)
        good = "".join(f"[{n}]" for n in numbers if n in allowed)
        return m.group(0)[: m.group(0).index("[")] + good if good else ""

    return _MARKER.sub(fix, text), invented


def is_empty_note(text: str) -> bool:
    stripped = text.strip().strip("-*• ").strip()
    return not re.search(r"\w", stripped) or stripped.upper().startswith("NONE")


class MapReduce:
    """One generation over labelled evidence; ``trace`` describes what happened."""

    def __init__(self, llm: LLM, config: AgentConfig):
        self.llm, self.config = llm, config
        self.trace: dict[str, Any] = {}

    def _budget(self, fixed: list[ChatMessage], reserve: int) -> int:
        """``split_tokens``, shrunk when the prompt around the split would overflow the context."""
        overhead = sum(self.llm.count_tokens(m.content) + 8 for m in fixed)
        room = self.llm.context_length - overhead - reserve - 64
        return max(MIN_BUDGET, min(self.config.split_tokens, room))

    async def generate(
        self,
        rewrite: Rewrite,
        operations: Sequence[Operation],
        docs: Sequence[DocumentInfo],
        labelled: Labelled,
    ) -> AsyncIterator[str]:
        """Stream the answer text (with ``[label]`` markers of ``labelled``)."""
        cfg, t0 = self.config, time.perf_counter()
        by_id, names = {d.doc_id: d for d in docs}, r.handles(docs)
        question = r.question_block(rewrite.original, rewrite.rewritten)
        self.trace = trace = {"path": "empty", "splits": [], "mappers": [], "reducer": {}}
        if not labelled:
            yield NOT_FOUND
            return

        def request(paragraphs: str) -> str:
            return r.evidence_request(operations, by_id, names, paragraphs, question)

        answer_prompt = r.example_messages(load("answer"))
        reserve = max(cfg.answer_tokens, cfg.mapper_tokens)
        budget = self._budget([*answer_prompt, ChatMessage("user", request(""))], reserve)
        cut = splitter(
            labelled,
            budget,
            self.llm.count_tokens,
            cfg.max_splits,
            cfg.truncation,
            cfg.similar_threshold,
            docs,
        )
        splits = iter(cut)
        first, second = next(splits, None), next(splits, None)
        if first is None:  # everything was skipped (cannot happen with a non-empty list)
            yield NOT_FOUND
            return
        if second is None:
            trace.update(path="direct", splits=[first.trace()], splitting=cut.report())
            trace["reducer"] = {"direct": True}  # one call answers: no mappers, no merging
            messages = [*answer_prompt, ChatMessage("user", request(first.text))]
            async for text in self._stream(messages, cfg.answer_tokens, trace["reducer"], t0):
                yield text
            trace["timings"] = {"total_s": round(time.perf_counter() - t0, 4)}
            return

        trace["path"] = "map_reduce"
        mapper_prompt = r.example_messages(load("mapper"))
        semaphore = asyncio.Semaphore(max(1, cfg.mapper_concurrency))
        tasks: list[asyncio.Task[dict[str, Any]]] = []
        made: list[Split] = []

        async def mapper(split: Split) -> dict[str, Any]:
            async with semaphore:
                start = time.perf_counter()
                messages = [*mapper_prompt, ChatMessage("user", request(split.text))]
                params = SamplingParams(temperature=0.0, max_tokens=cfg.mapper_tokens, seed=0)
                out = await complete(self.llm, messages, params)
            text = _PARTIAL_MARKER.sub("", out.text.strip())  # cut off by max_tokens
            notes, invented = keep_known_labels(text, split.labels)
            return {
                "split": split.index,
                "output": notes,
                "empty": is_empty_note(notes),
                "invented_labels": invented,
                "finish_reason": out.finish_reason,
                "max_tokens": cfg.mapper_tokens,
                "prompt_tokens": out.usage.prompt_tokens,
                "completion_tokens": out.usage.completion_tokens,
                "start_s": round(start - t0, 4),
                "end_s": round(time.perf_counter() - t0, 4),
            }

        try:
            for split in itertools.chain((first, second), splits):  # cut while mappers run
                made.append(split)
                tasks.append(asyncio.create_task(mapper(split), name=f"mapper-{split.index}"))
                await asyncio.sleep(0)  # let the new mapper start before cutting the next split
            split_s = time.perf_counter() - t0
            results = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        trace.update(splits=[s.trace() for s in made], splitting=cut.report(), mappers=results)
        map_s = time.perf_counter() - t0
        parts = [
            (s.index + 1, r.sources_line(s.runs(), by_id, names), res["output"])
            for s, res in zip(made, results, strict=True)
            if not res["empty"]
        ]
        if not parts:
            trace["reducer"] = {"skipped": "no mapper found relevant facts"}
            yield NOT_FOUND
        else:
            user = r.reducer_request(operations, by_id, names, parts, question)
            messages = [*r.example_messages(load("reducer")), ChatMessage("user", user)]
            trace["reducer"] = {"input": user, "parts": [p[0] for p in parts]}
            async for text in self._stream(messages, cfg.answer_tokens, trace["reducer"], t0):
                yield text
        trace["timings"] = {
            "split_s": round(split_s, 4),
            "map_s": round(map_s, 4),
            "total_s": round(time.perf_counter() - t0, 4),
        }

    async def _stream(
        self, messages: list[ChatMessage], max_tokens: int, info: dict[str, Any], t0: float
    ) -> AsyncIterator[str]:
        """Stream one answering call, recording first-token time and usage into ``info``."""
        params = SamplingParams(temperature=self.config.temperature, max_tokens=max_tokens, seed=0)
        async for delta in self.llm.stream(messages, params):
            if delta.text:
                info.setdefault("first_token_s", round(time.perf_counter() - t0, 4))
                yield delta.text
            if delta.usage is not None:
                info.update(
                    prompt_tokens=delta.usage.prompt_tokens,
                    completion_tokens=delta.usage.completion_tokens,
                    finish_reason=delta.finish_reason,
                )
