"""Prompt normalisation and the self-echo rule (10 latest messages only)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from sessionstate.upstream.normalize import ECHO_WINDOW, is_self_echo, normalize_prompt


def test_whitespace_runs_collapse_and_ends_strip() -> None:
    assert normalize_prompt("  Run\tthe \n\n tests\u00a0now \r\n") == "run the tests now"


def test_case_folds_beyond_lower() -> None:
    assert normalize_prompt("STRASSE") == normalize_prompt("Straße")
    assert normalize_prompt("ΣΊΣΥΦΟΣ") == normalize_prompt("σίσυφος")


def test_composed_and_decomposed_forms_agree() -> None:
    composed = "caf\u00e9 na\u00efve"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    assert normalize_prompt(composed) == normalize_prompt(decomposed)


@given(st.text())
def test_normalisation_is_idempotent(text: str) -> None:
    once = normalize_prompt(text)
    assert normalize_prompt(once) == once
    assert once == once.strip()
    assert "  " not in once


def test_echo_matches_after_normalisation() -> None:
    sent = ["Deploy the\nstaging build", "other"]
    assert is_self_echo("  deploy THE staging   build ", sent)
    assert not is_self_echo("deploy the staging build now", sent)


def test_only_the_ten_latest_messages_count() -> None:
    sent = [f"message {n}" for n in range(15)]  # chronological: 14 is the latest
    assert ECHO_WINDOW == 10
    assert is_self_echo("message 5", sent)  # the 10th latest
    assert not is_self_echo("message 4", sent)  # the 11th latest: a human repeating it
    assert is_self_echo("MESSAGE 14", sent)
    assert not is_self_echo("anything", [])


def test_truncated_text_matches_by_prefix_only() -> None:
    long_prompt = "Please review " + "é" * 3000
    prefix = unicodedata.normalize("NFD", long_prompt)[:1024]  # cut may split "e" + accent
    assert is_self_echo(prefix, [long_prompt], truncated=True)
    assert not is_self_echo(prefix, [long_prompt[:500]], truncated=True)
    assert not is_self_echo("   \n  ", ["anything"], truncated=True)
