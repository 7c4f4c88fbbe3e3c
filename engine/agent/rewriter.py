"""Query rewriter: a follow-up question plus the recent turns → one standalone query.

Why: planning and retrieval see a single query, so "how accurate is it?" must become "how
accurate is DPR?". Most questions are self-contained, and an LLM call costs seconds on a CPU, so a
cheap cue check (pronouns, demonstratives, ellipsis openers, very short follow-ups) decides first
whether there is anything to resolve. The LLM output is JSON-schema constrained at temperature 0:
the relevant turns, what the pronoun refers to, then the query. The 0.5B model names the referent
far more reliably than it rewrites the sentence, so when it leaves the pronoun in place we
substitute the referent ourselves (only a short phrase taken from the conversation). The result
is then checked; anything doubtful (empty, far too long, an answer instead of a question, the
question's own words lost) falls back to the original, which is always kept next to the rewrite.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from engine.agent.config import AgentConfig
from engine.agent.prompts import load
from engine.agent.types import Rewrite, Turn
from engine.llm.base import LLM, ChatMessage, SamplingParams, complete

_WORDS = re.compile(r"[\w'’-]+")
_CUE_WORDS = re.compile(
    r"\b(it|its|it's|itself|they|them|their|theirs|themselves|this|that|these|those|he|him|his|"
    r"she|her|hers|there|former|latter|same|another|else|too|also|instead|again|above)\b",
    re.IGNORECASE,
)
_CUE_PHRASES = re.compile(
    r"\bthe (first|second|third|fourth|fifth|last|next|previous|other)( ones?)?\b"
    r"|^\s*(and|or|but|so|what about|how about|same for|why|how come|then|more)\b",
    re.IGNORECASE,
)
_QUESTION_START = frozenset(
    "what who whom whose which when where why how is are was were do does did can could should "
    "would will has have had may might must summarize summarise list explain describe compare "
    "give tell show find name define outline provide state".split()
)
_NOT_CONTENT = frozenset(
    "the a an and or but for of in on at to by with from about what who whom whose which when "
    "where why how is are was were do does did can could should would will has have had may might "
    "must it its they them their this that these those there same also too more then again please "
    "tell me about".split()
)
_REPLACEABLE = re.compile(
    r"\b(the (first|second|third|fourth|last|other) one|this one|that one|it|its|they|them|their"
    r"|he|him|his|she|her)\b",
    re.IGNORECASE,
)
# "her" is possessive before a noun ("her first album") and an object before these or at the end.
_NOT_A_NOUN = frozenset(
    "in on at to for with from about after before during and or but as when while than that "
    "into over under by".split()
)
_PERSONAL = frozenset("he him his she her".split())
_NAME_PARTICLES = frozenset("de van von der den da di du la le bin ibn al el st. jr. sr.".split())
SHORT_FOLLOW_UP = 3  # words: "Why?", "In 2021?", "Top-100 accuracy?"


def needs_rewrite(query: str, history: Sequence[Turn]) -> bool:
    """Whether the query may refer to earlier turns (no history: never)."""
    if not history:
        return False
    if len(_WORDS.findall(query)) <= SHORT_FOLLOW_UP:
        return True
    return bool(_CUE_WORDS.search(query) or _CUE_PHRASES.search(query))


def _clip(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


def render_request(turns: Sequence[Turn | dict[str, str]], question: str) -> str:
    """The user message: numbered turns (answers clipped: their start names the subject)."""
    lines = []
    for n, turn in enumerate(turns, start=1):
        user = turn["user"] if isinstance(turn, dict) else turn.user
        answer = turn["assistant"] if isinstance(turn, dict) else turn.assistant
        lines.append(f"Turn {n}\nUser: {_clip(user, 60)}\nAssistant: {_clip(answer, 40)}")
        searched = [] if isinstance(turn, dict) else [o.query for o in turn.operations if o.query]
        if searched:
            lines.append("Searched: " + "; ".join(dict.fromkeys(searched)))
    return "\n".join(lines) + f"\n\nLast question: {question}\n{_hint(question)}"


def _hint(question: str) -> str:
    """Name what to resolve: a small model follows a concrete pointer better than a rule."""
    cues = [m.group(0) for m in _CUE_WORDS.finditer(question)]
    cues += [m.group(0) for m in _CUE_PHRASES.finditer(question) if m.group(0).startswith("the ")]
    todo = [", ".join(f'"{c}"' for c in dict.fromkeys(cues))] if cues else []
    short = len(_WORDS.findall(question)) <= SHORT_FOLLOW_UP
    opener = any(not m.group(0).startswith("the ") for m in _CUE_PHRASES.finditer(question))
    if short or opener:
        todo.append("complete the short question")
    return "Resolve: " + "; ".join(todo)


def schema(n_turns: int) -> dict[str, Any]:
    """Turn numbers are an enum, so the model cannot name a turn that does not exist.
    ``refers_to`` (what the pronoun means) comes before ``query``: naming the referent first
    is a step a small model gets right more often, and lets us substitute it ourselves."""
    turns = {"type": "integer", "enum": list(range(1, n_turns + 1))}
    return {
        "type": "object",
        "properties": {
            "relevant_turns": {"type": "array", "items": turns, "maxItems": n_turns},
            "refers_to": {"type": "string", "maxLength": 100},
            "query": {"type": "string", "maxLength": 300},
        },
        "required": ["relevant_turns", "refers_to", "query"],
        "additionalProperties": False,
    }


def messages_for(turns: Sequence[Turn], query: str) -> list[ChatMessage]:
    prompt = load("rewriter")
    messages = [ChatMessage("system", prompt.system)]
    for ex in prompt.examples:
        messages.append(ChatMessage("user", render_request(ex["turns"], ex["question"])))
        answer = {k: ex[k] for k in ("relevant_turns", "refers_to", "query")}
        messages.append(ChatMessage("assistant", json.dumps(answer)))
    messages.append(ChatMessage("user", render_request(turns, query)))
    return messages


def substitute(question: str, referent: str) -> str | None:
    """``question`` with its first pronoun replaced by ``referent`` (possessive for its/their/his,
    and for "her" before a noun);
    None when there is no pronoun we can safely replace."""
    m = _REPLACEABLE.search(question)
    if m is None:
        return None
    word = m.group(0).lower()
    if word in _PERSONAL and not _name_like(referent):
        return None  # "he" is a person: a section title or a phrase is not what it means
    possessive = word in ("its", "their", "his")
    if word == "her":
        following = _WORDS.findall(question[m.end() :])
        possessive = bool(following) and following[0].lower() not in _NOT_A_NOUN
    return question[: m.start()] + referent + ("'s" if possessive else "") + question[m.end() :]


def _name_like(text: str) -> bool:
    """Capitalised words, name particles allowed ("Lee Trevino", "Ludwig van Beethoven")."""
    words = text.split()
    return bool(words) and all(
        (w[0].isupper() and not w.endswith(("'s", "’s"))) or w.lower() in _NAME_PARTICLES
        for w in words
    )


def _usable_referent(referent: str, query: str, turns: Sequence[Turn]) -> bool:
    """A short phrase taken from the conversation, not a pronoun, not already in the query."""
    words = _content_words(referent)
    seen = _content_words(" ".join(f"{t.user} {t.assistant}" for t in turns))
    return (
        0 < len(_WORDS.findall(referent)) <= 8
        and bool(words)
        and len(words & seen) * 2 >= len(words)
        and not words <= _content_words(query)
    )


def _question_shaped(text: str) -> bool:
    words = _WORDS.findall(text.lower())
    return text.rstrip().endswith("?") or (bool(words) and words[0] in _QUESTION_START)


def _content_words(text: str) -> set[str]:
    return {w[:5] for w in _WORDS.findall(text.lower()) if w not in _NOT_CONTENT and len(w) > 1}


def rejection(candidate: str, query: str, history: Sequence[Turn]) -> str | None:
    """Why ``candidate`` is not an acceptable rewrite of ``query``; None when it is."""
    if not candidate:
        return "empty"
    n_query = len(_WORDS.findall(query))
    if len(_WORDS.findall(candidate)) > max(40, 3 * n_query + 20):
        return "too long"
    low = candidate.lower().rstrip("?. ")
    if any(len(low) > 20 and low in t.assistant.lower() for t in history):
        return "copied from an answer"
    if _question_shaped(query) and not _question_shaped(candidate):
        return "not a question (an answer?)"
    wanted = _content_words(query)
    if wanted and len(wanted & _content_words(candidate)) * 2 < len(wanted):
        return "lost the question's words"
    return None


async def rewrite_traced(
    llm: LLM, query: str, history: Sequence[Turn], config: AgentConfig
) -> tuple[Rewrite, dict[str, Any]]:
    """Like :func:`rewrite`, plus trace info (raw output, fallback reason)."""
    query = query.strip()
    window = recent(history, config.history_turns)
    if not needs_rewrite(query, window):
        reason = "no history" if not window else "nothing to resolve"
        return Rewrite(query, query, (), skipped_llm=True), {"skipped": reason}
    params = SamplingParams(
        temperature=0.0, max_tokens=120, seed=0, json_schema=schema(len(window))
    )
    out = await complete(llm, messages_for(window, query), params)
    rewrite, trace = resolve(out.text, query, history, config.history_turns)
    return rewrite, {"raw": out.text, "turns_seen": len(window)} | trace


def recent(history: Sequence[Turn], turns: int) -> list[Turn]:
    """The last ``turns`` turns, the rewriter's window onto the conversation (none if 0)."""
    return list(history)[-turns:] if turns > 0 else []


def resolve(
    raw: str, query: str, history: Sequence[Turn], turns: int
) -> tuple[Rewrite, dict[str, Any]]:
    """The rewrite that the model's JSON output ``raw`` stands for, the model having seen the
    last ``turns`` turns of ``history`` (no LLM: benchmarks replay stored outputs through it)."""
    window = recent(history, turns)
    offset = len(history) - len(window)
    trace: dict[str, Any] = {}
    try:
        data = json.loads(raw)
        candidate = " ".join(str(data["query"]).split()).strip("\"' ")
        referent = " ".join(str(data.get("refers_to") or "").split()).strip("\"'.?! ")
        numbers = [n for n in data.get("relevant_turns", []) if isinstance(n, int)]
    except (ValueError, KeyError, TypeError) as exc:
        trace["fallback"] = f"unparsable output ({type(exc).__name__})"
        return Rewrite(query, query), trace
    # The model named the referent but left the pronoun in place: substitute it ourselves.
    unresolved = _REPLACEABLE.search(candidate) and not (
        _content_words(referent) <= _content_words(candidate)
    )
    if unresolved and _usable_referent(referent, query, window):
        candidate = substitute(candidate, referent) or candidate
        trace["substituted"] = referent
    if reason := rejection(candidate, query, window):
        trace["fallback"] = reason
        return Rewrite(query, query), trace
    used = tuple(sorted({offset + n - 1 for n in numbers if 1 <= n <= len(window)}))
    return Rewrite(query, candidate, used), trace


async def rewrite(llm: LLM, query: str, history: Sequence[Turn], config: AgentConfig) -> Rewrite:
    """A standalone version of ``query``; ``Rewrite.original`` always keeps the user's words."""
    result, _ = await rewrite_traced(llm, query, history, config)
    return result
