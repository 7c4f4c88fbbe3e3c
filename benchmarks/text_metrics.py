"""Lexical overlap between a candidate text and a reference: token F1 and ROUGE-L.

Why our own: ``rouge-score`` is not a dependency, and both measures are a few lines once the
text is tokenised. Tokens are lowercased words with punctuation turned into spaces (so
"Zappa's" still shares "zappa" with "Zappa"); stop words and articles are kept, because in a
rewrite they are part of the question. Any benchmark comparing generated text with a human
reference (rewrites, answers) can reuse these.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence


def tokens(text: str) -> list[str]:
    """Lowercased words; every Unicode punctuation or symbol character splits words."""
    chars = [
        " " if unicodedata.category(c)[0] in "PS" else c
        for c in unicodedata.normalize("NFKC", text)
    ]
    return "".join(chars).lower().split()


def _f_measure(overlap: int, n_candidate: int, n_reference: int) -> float:
    if n_candidate == 0 and n_reference == 0:
        return 1.0  # two empty texts agree
    if overlap == 0:
        return 0.0
    precision, recall = overlap / n_candidate, overlap / n_reference
    return 2 * precision * recall / (precision + recall)


def token_f1(candidate: str, reference: str) -> float:
    """SQuAD-style F1 over the multiset of tokens (order ignored)."""
    cand, ref = tokens(candidate), tokens(reference)
    overlap = sum((Counter(cand) & Counter(ref)).values())
    return _f_measure(overlap, len(cand), len(ref))


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (O(len(a)·len(b)) time, O(len(b)) memory)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0  # row[j-1] of the previous row
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(row[j], row[j - 1])
            diagonal = above
    return row[len(b)]


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 (beta = 1): like token F1, but only words in the same order count."""
    cand, ref = tokens(candidate), tokens(reference)
    return _f_measure(lcs_length(cand, ref), len(cand), len(ref))
