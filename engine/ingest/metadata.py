"""Document metadata: the LLM-written one-to-two-sentence description.

It runs in the background after a document is queryable, so search never waits for it; the planner
of the briefing agent reads it to decide which documents a question is about.
"""

from __future__ import annotations

import re

from engine.ingest.document import ParsedDocument
from engine.llm.base import LLM, ChatMessage, SamplingParams, complete

SYSTEM = (
    "You write one or two plain sentences describing what a document is and what it covers "
    "(its type, subject, and the main topics). No preamble, no lists, no markdown."
)
MAX_CONTEXT_TOKENS = 400
BACKGROUND = 10  # descriptions wait behind interactive chat turns


def excerpt(doc: ParsedDocument, count_tokens, budget: int = MAX_CONTEXT_TOKENS) -> str:
    """The title plus leading paragraphs up to ``budget`` tokens (the start of a document says
    most about what it is)."""
    lines, used = [], 0
    for p in doc.paragraphs:
        n = count_tokens(p.text)
        if used + n > budget:
            if not lines:
                lines.append(p.text[: budget * 4])
            break
        lines.append(p.text)
        used += n
    return "\n".join(lines)


def clean(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip().strip('"').strip()
    text = re.sub(r"^(this document|description)\s*:\s*", "", text, flags=re.I)
    sentences = re.split(r"(?<=[.!?])\s+", text)
    return " ".join(sentences[:2]).strip()


async def describe(llm: LLM, doc: ParsedDocument, max_tokens: int = 64) -> str:
    body = excerpt(doc, llm.count_tokens)
    user = f"Title: {doc.title}\nKind: {doc.kind}\nPages: {doc.pages or 'n/a'}\n\n{body}"
    out = await complete(
        llm,
        [ChatMessage("system", SYSTEM), ChatMessage("user", user)],
        SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0, priority=BACKGROUND),
    )
    return clean(out.text)
