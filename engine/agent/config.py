"""Settings of the briefing agent (the server fills them from ``BRIEF_AGENT_*`` settings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class AgentConfig:
    # rewriter
    history_turns: int = 3  # how many previous turns the rewriter may look at
    # planner
    max_operations: int = 6
    # routing (engine/agent/routing.py): drop SEARCHes of documents the index says are off-topic
    route_k: int = 10  # hits per query searched across the plan's documents
    route_keep_ratio: float = 0.5  # keep a document holding >= this share of the best's mass
    # context builder
    search_level: str = "small"  # chunk level searched (see engine/ingest/chunking.py)
    search_k: int = 4  # hits per SEARCH (3-5)
    window_before: int = 1  # window expansion: chunks k-cb .. k+cf around each hit
    window_after: int = 1
    semantic_window: int = 2  # extra non-neighbouring chunks very similar to a hit (0 = off)
    semantic_min_similarity: float = 0.80  # cosine between a hit and a chunk it pulls in
    score_threshold: float = 0.0  # drop hits whose normalised fused score is below this
    fusion: Literal["rrf", "convex"] = "rrf"
    # map-reduce
    split_tokens: int = 1800  # token budget of one split's evidence (model tokenizer)
    max_splits: int = 6  # cap on the number of splits (mapper calls)
    truncation: Literal["stop", "skip_similar"] = "skip_similar"
    similar_threshold: float = 0.6  # n-gram Jaccard above which a chunk is a near-duplicate
    mapper_concurrency: int = 2
    answer_tokens: int = 384  # max_tokens of the final answer
    mapper_tokens: int = 256  # max_tokens of one mapper output
    temperature: float = 0.0
    # citations
    citation_min_overlap: float = 0.35  # n-gram support needed to keep a citation
    # grounding (engine/agent/grounding.py): leave out sentences with figures nothing shown holds
    unsupported_figures: Literal["drop", "keep"] = "drop"
