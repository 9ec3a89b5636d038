"""How the runner splits the llama layout's heads and columns over ranks (pure parts)."""

from __future__ import annotations

import pytest

from skulk.services.runner.llama_split import even_parts, head_split


def test_parts_cover_the_whole_with_the_low_ranks_taking_the_extra():
    assert even_parts(1536, 2) == [768, 768] and even_parts(7, 3) == [3, 2, 2]


def test_heads_go_in_whole_groups_with_their_key_value_head():
    """SmolLM2: 9 query heads in 3 groups of 3 over 2 ranks: 2 groups and 1."""
    assert head_split(9, 3, 2, 0) == (slice(0, 6), slice(0, 2))
    assert head_split(9, 3, 2, 1) == (slice(6, 9), slice(2, 3))
    covered = [h for r in range(3) for h in range(32)[head_split(32, 8, 3, r)[0]]]
    assert covered == list(range(32))


def test_a_ring_wider_than_the_key_value_heads_is_refused():
    with pytest.raises(ValueError, match="3 key-value heads cannot be split over 4 ranks"):
        head_split(9, 3, 4, 0)
