"""Token F1 and ROUGE-L (benchmarks/text_metrics.py) on hand-checked cases."""

from __future__ import annotations

import pytest

from benchmarks.text_metrics import lcs_length, rouge_l, token_f1, tokens


def test_tokens_lowercase_and_split_on_punctuation():
    assert tokens("When did Zappa's band—the Mothers—disband?") == [
        "when", "did", "zappa", "s", "band", "the", "mothers", "disband",
    ]  # fmt: skip
    assert tokens("  Top-20 accuracy, 2021!  ") == ["top", "20", "accuracy", "2021"]
    assert tokens("?!") == []


def test_identical_texts_score_one_whatever_case_and_punctuation():
    assert token_f1("What is DPR?", "what is dpr") == 1.0
    assert rouge_l("What is DPR?", "what is dpr") == 1.0


def test_disjoint_and_empty_texts():
    assert token_f1("alpha beta", "gamma delta") == 0.0
    assert rouge_l("alpha beta", "gamma delta") == 0.0
    assert token_f1("", "something") == 0.0 and rouge_l("something", "") == 0.0
    assert token_f1("", "") == 1.0 and rouge_l("?", "") == 1.0


def test_token_f1_counts_repeated_tokens_once_per_occurrence():
    # candidate: when did they disband (4); reference: when did zappa and the mothers disband (7)
    f1 = token_f1("When did they disband?", "When did Zappa and the Mothers disband?")
    precision, recall = 3 / 4, 3 / 7
    assert f1 == pytest.approx(2 * precision * recall / (precision + recall))
    assert token_f1("the the the", "the cat") == pytest.approx(
        2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2)
    )


def test_rouge_l_depends_on_order_token_f1_does_not():
    assert token_f1("a b c d", "d c b a") == 1.0
    assert rouge_l("a b c d", "d c b a") == pytest.approx(0.25)  # LCS is a single token
    assert rouge_l("a b c d", "a x c d") == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("", "", 0),
        ("abc", "", 0),
        ("abcbdab", "bdcaba", 4),  # the textbook example (e.g. "bcba")
        ("abc", "abc", 3),
        ("axbycz", "abc", 3),
    ],
)
def test_lcs_length(a, b, expected):
    assert lcs_length(list(a), list(b)) == expected
    assert lcs_length(list(b), list(a)) == expected
