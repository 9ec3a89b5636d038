"""The integration tests' comparison with llama.cpp's own answers (`tests/integration/llama_parity.py`):
a parting at a near-tie passes, any other parting fails, wherever the texts part."""

from __future__ import annotations

from tests.integration.llama_parity import disagreement

REF = {"text": "It's a miracle that", "noise": 0.0,  # tolerance 0.3
       "tokens": [["It", -1.0, 2.0], ["'s", -0.5, 1.9], [" a", -2.4, 0.03], [" miracle", -0.9, 2.3],
                  [" that", -0.7, 0.95]]}


def test_the_same_text_agrees():
    assert disagreement("It's a miracle that", REF) == ""


def test_a_longer_token_at_a_near_tie_agrees_though_the_texts_part_after_it():
    """' amazing' where llama.cpp chose ' a' by 0.03 nats: the texts part at the start of ' miracle'
    (a lead of 2.3), but the choice was made at ' a'."""
    assert disagreement("It's amazing. It", REF) == ""


def test_a_parting_where_llama_cpp_led_by_far_is_reported():
    assert "reference token 1" in disagreement("It was a miracle", REF)
    assert "reference token 4" in disagreement("It's a miracle, yes", REF)


def test_a_parting_at_a_token_boundary_after_a_clear_choice_is_reported():
    clear = {**REF, "tokens": [*REF["tokens"][:2], [" a", -0.1, 3.0], *REF["tokens"][3:]]}
    assert "reference token 3" in disagreement("It's amazing. It", clear)
