"""The llama.cpp engine's pure parts: sequence ids, the prefix cache, the samplers."""

from __future__ import annotations

import numpy as np

from skulk.services.runner.llamacpp.prefix import MIN_REUSE, PrefixCache, Sequences, common_prefix
from skulk.services.runner.llamacpp.sample import Sampler, log_softmax, nucleus, top_logprobs


def test_common_prefix():
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    assert common_prefix(a, np.array([1, 2, 9], dtype=np.int32)) == 2
    assert common_prefix(a, a[:2]) == 2 and common_prefix(a, np.array([], dtype=np.int32)) == 0


def test_sequences_are_taken_lowest_first_and_given_back():
    seqs = Sequences(3)
    assert [seqs.take(), seqs.take()] == [0, 1]
    seqs.give(0)
    assert [seqs.take(), seqs.take(), seqs.take()] == [0, 2, None]


def test_the_longest_shared_prefix_is_reused_and_one_prompt_token_is_left_to_run():
    cache = PrefixCache(max_entries=4, max_tokens=1000)
    base = list(range(100, 120))
    assert cache.add(5, base) == [] and cache.add(6, base[:10] + [1, 2, 3]) == []
    assert cache.nearest(base + [7, 8]) == (5, 20)
    assert cache.nearest(base) == (5, 19)  # the whole prompt is cached: its last token runs again
    assert cache.nearest(base[:MIN_REUSE - 1] + [0] * 10) is None  # too short to be worth it
    assert cache.nearest([1, 2, 3] * 10) is None


def test_entries_are_evicted_least_recently_used_by_count_and_by_tokens():
    cache = PrefixCache(max_entries=2, max_tokens=50)
    cache.add(1, list(range(20)))
    cache.add(2, list(range(100, 120)))
    cache.nearest(list(range(20)) + [5])  # 1 is now the most recent
    assert cache.add(3, list(range(200, 220))) == [2]
    assert cache.add(4, list(range(300, 320))) == [1]  # 60 tokens > 50 as well as 3 entries
    assert cache.add(9, list(range(60))) == [9]  # longer than the whole budget: not kept
    assert cache.trim(0) == [3, 4] and len(cache) == 0


def test_the_cache_says_beforehand_what_it_would_keep():
    """The engine copies a finished row's cells out of llama.cpp only for an entry kept."""
    assert PrefixCache(max_entries=2, max_tokens=50).takes(50)
    assert not PrefixCache(max_entries=2, max_tokens=50).takes(51)
    assert not PrefixCache(max_entries=2, max_tokens=50).takes(0)
    assert not PrefixCache(max_entries=0, max_tokens=50).takes(10)  # runner.prefix_cache_mb: 0


def test_greedy_is_the_first_arg_max_and_a_seeded_sampler_repeats():
    logits = np.array([0.0, 3.0, 3.0, 1.0], dtype=np.float32)
    assert Sampler(0.0, 1.0, 0, 0.0, 0)(logits) == 1
    draws = [Sampler(1.0, 0.9, 3, 0.05, seed)(logits) for seed in (7, 7)]
    assert draws[0] == draws[1] and draws[0] in (1, 2, 3)
    assert Sampler(1.0, 1.0, 1, 0.0, 1)(np.array([0.0, 0.0, 5.0], dtype=np.float32)) == 2  # top_k=1


def test_top_logprobs_are_normalised_and_best_first():
    lp = log_softmax(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    assert abs(float(np.exp(lp).sum()) - 1.0) < 1e-5
    mine, top = top_logprobs(lp, 0, 2)
    assert [t for t, _ in top] == [2, 1] and mine == float(lp[0])


def test_the_nucleus_is_the_smallest_set_reaching_top_p_sharp_or_flat():
    rng = np.random.default_rng(0)
    for scale in (8.0, 0.01):  # a sharp distribution, and one so flat the first candidates do not reach it
        lp = log_softmax((rng.standard_normal(50_000) * scale).astype(np.float32))
        mask = nucleus(lp, 0.9)
        order = np.argsort(-lp)
        want = int(np.searchsorted(np.cumsum(np.exp(lp[order])), 0.9)) + 1
        assert mask.sum() == want and mask[order[:want]].all()


def test_prompts_prefill_oldest_first_within_the_steps_budget():
    from skulk.services.runner.scheduler import prefill_in_order

    assert prefill_in_order(256, [156, 156, 154]) == [156, 100, 0]
    assert prefill_in_order(256, [56, 156, 154]) == [56, 156, 44]
    assert prefill_in_order(256, [10, 0, 5]) == [10, 0, 5] and prefill_in_order(0, [3]) == [0]
