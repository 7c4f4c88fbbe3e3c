"""Figures the answer states that nothing the model was shown contains: hold them back.

Why: asked for something the documents do not hold (a launch price, a revenue figure), a small
model answers anyway and invents the number ("$12.4 million"). Telling it to say "the documents
do not say" is not enough, and few-shot examples of abstaining get copied into real answers
(benchmarks/README: abstention). A figure is checkable without a model: if no number in the
evidence, the question or the document descriptions rounds to it, the model made it up.

A figure is a number with its decimals and an optional scale word ("$12.4 million", "41.5%",
"1,024"). It is *supported* when some known number, multiplied by a power of 1000 or by 100 or
1/100 (millions written as billions, a ratio written as a percentage), rounds to it at the
figure's own precision, so "12,437" (in millions) supports "$12.4 billion". Integers below 10
are not checked (counts and list numbers that documents spell out). A sentence with an
unsupported figure is left out of the answer; when every sentence was left out the answer
becomes an abstention, otherwise a closing note says what was left out and why. Numbers the
model computes (a difference, a growth rate) are left out too: with the CPU default model they
are wrong more often than not; ``AgentConfig.unsupported_figures = "keep"`` turns this off.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable
from typing import NamedTuple

from engine.agent.citations import MARKER  # the labels the model cites: "[3]", "[p. 2-4]"

ABSTAIN = "The documents I searched do not state this."
SMALL = 10  # integers below this are not checked
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "bn": 1e9, "mn": 1e6}
_FIGURE = re.compile(
    r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
    r"(?:\s*(thousand|million|billion|trillion|bn|mn)\b)?(?!\.?\w)",
    re.IGNORECASE,
)
_FACTORS = (1.0, 1e3, 1e6, 1e9, 1e-3, 1e-6, 1e-9, 100.0, 0.01)


class Figure(NamedTuple):
    written: str  # as in the text: "$12.4 billion" → "12.4 billion"
    value: float  # with the scale word: 12.4e9
    decimals: int  # as written: 1
    scale: float  # the scale word's factor, 1.0 without one


def figures(text: str) -> list[Figure]:
    """Every number in ``text`` outside citation markers ("2.5 million" → 2500000.0, 1
    decimal, scale 1e6)."""
    out = []
    for m in _FIGURE.finditer(MARKER.sub(" ", text)):
        whole, frac, word = m.group(1), m.group(2), m.group(3)
        scale = _SCALES[word.lower()] if word else 1.0
        value = float(whole.replace(",", "") + (f".{frac}" if frac else "")) * scale
        out.append(Figure(m.group(0), value, len(frac) if frac else 0, scale))
    return out


class FigureCheck:
    """Screens the sentences of one answer against the numbers the model was shown."""

    def __init__(self, known_texts: Iterable[str]):
        values = {f.value for text in known_texts for f in figures(text)}
        self._known = sorted({v * f for v in values for f in _FACTORS})
        self.dropped: list[str] = []
        self.unsupported: list[str] = []
        self.kept = 0  # sentences with content that went through

    def supported(self, figure: Figure) -> bool:
        """Does some known number, at some scale, round to this figure?"""
        # Compare the number as written too: "12.4" of "12.4 billion".
        for target in {figure.value, figure.value / figure.scale}:
            tol = 0.5 * 10.0**-figure.decimals * (1 + 1e-9) + abs(target) * 1e-12
            lo = bisect_left(self._known, target - tol)
            if lo < len(self._known) and self._known[lo] <= target + tol:
                return True
        return False

    def screen(self, sentence: str) -> bool:
        """True: show the sentence. False: it states a figure the evidence does not hold."""
        bad = [
            f.written.strip()
            for f in figures(sentence)
            if (f.decimals > 0 or f.value >= SMALL) and not self.supported(f)
        ]
        if bad:
            self.dropped.append(sentence.strip())
            self.unsupported.extend(b for b in bad if b not in self.unsupported)
            return False
        if MARKER.sub("", sentence).strip(" \t\n.,;:-*"):
            self.kept += 1
        return True

    def closing(self) -> str:
        """What to add after the answer: an abstention when nothing was kept, otherwise a note
        naming the figures that were left out; empty when nothing was."""
        if not self.dropped:
            return ""
        if not self.kept:
            return ABSTAIN
        n = len(self.dropped)
        what = "a statement" if n == 1 else f"{n} statements"
        return (
            f"\n\n(Left out {what} with figures not found in the documents: "
            f"{', '.join(self.unsupported[:5])}.)"
        )

    def trace(self) -> dict[str, object]:
        return {"dropped": self.dropped, "unsupported": self.unsupported}
