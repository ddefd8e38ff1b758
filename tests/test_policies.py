"""Hand-worked unit tests of the stable-hypothesis policies (2022 paper §3.3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulst.config import PolicyOptions
from simulst.errors import OptionError
from simulst.policies import (
    BeamAgreement,
    HoldN,
    LocalAgreement,
    Offline,
    SharedPrefix,
    WaitK,
    WaitKWords,
    make_policy,
)
from simulst.sequences import longest_common_prefix
from simulst.types import Hypothesis
from tests.toy import StreamPolicy, ToyTokenizer, stream_policy


def hyps(*beams: tuple[int, ...]) -> list[Hypothesis]:
    return [Hypothesis(b, -float(i)) for i, b in enumerate(beams)]


def test_lcp() -> None:
    assert longest_common_prefix([(1, 2, 3), (1, 2, 4), (1, 2)]) == (1, 2)
    assert longest_common_prefix([(1, 2, 3)]) == (1, 2, 3)
    assert longest_common_prefix([(1,), (2,)]) == ()
    assert longest_common_prefix([]) == ()


def test_hold_n_drops_last_n_tokens() -> None:
    policy = stream_policy(HoldN(2))
    assert policy.stable_prefix(hyps((5, 6, 7, 8))) == (5, 6)
    assert policy.stable_prefix(hyps((5, 6))) == ()  # n or fewer tokens: nothing
    assert policy.stable_prefix(hyps((5,))) == ()
    assert stream_policy(HoldN(0)).stable_prefix(hyps((5, 6))) == (5, 6)


def test_local_agreement_waits_n_minus_1_chunks_then_agrees() -> None:
    la2 = stream_policy(LocalAgreement(2))
    assert la2.stable_prefix(hyps((1, 2, 3))) == ()  # chunk 1 < n
    assert la2.stable_prefix(hyps((1, 2, 4, 5))) == (1, 2)  # LCP of chunks 1, 2
    assert la2.stable_prefix(hyps((1, 2, 4, 6))) == (1, 2, 4)  # LCP of chunks 2, 3 only
    la3 = stream_policy(LocalAgreement(3))
    assert la3.stable_prefix(hyps((1, 2))) == ()
    assert la3.stable_prefix(hyps((1, 2, 3))) == ()
    assert la3.stable_prefix(hyps((1, 9))) == (1,)
    assert la3.stable_prefix(hyps((1, 9, 3))) == (1,)  # (1,2,3), (1,9), (1,9,3)
    assert la3.stable_prefix(hyps((1, 9, 3, 4))) == (1, 9)


def test_local_agreement_uses_only_the_best_hypothesis() -> None:
    la1 = stream_policy(LocalAgreement(1))
    assert la1.stable_prefix(hyps((1, 2), (7, 8))) == (1, 2)


def test_shared_prefix_uses_all_beams_of_n_chunks() -> None:
    sp1 = stream_policy(SharedPrefix(1))
    assert sp1.stable_prefix(hyps((1, 2, 3), (1, 2, 4), (1, 5))) == (1,)
    sp2 = stream_policy(SharedPrefix(2))
    assert sp2.stable_prefix(hyps((1, 2, 3), (1, 2, 4))) == ()
    assert sp2.stable_prefix(hyps((1, 2, 3, 4), (1, 2, 3, 5))) == (1, 2)  # (1,2,4) of chunk 1 limits it
    assert sp2.stable_prefix(hyps((1, 2, 3, 4, 5), (1, 2, 3, 4, 6))) == (1, 2, 3)


def test_beam_agreement_agrees_with_any_beam_of_each_earlier_chunk() -> None:
    ba2 = stream_policy(BeamAgreement(2))
    assert ba2.stable_prefix(hyps((1, 2, 3), (4, 5, 6))) == ()  # chunk 1 < n
    # chunk 2's best (4,5,7) shares nothing with chunk 1's best (LA-2: ()), (4,5) with its second beam
    assert ba2.stable_prefix(hyps((4, 5, 7), (4, 8, 9, 2))) == (4, 5)
    # LA-2 would commit (4,) here (chunk 2's best is (4,5,7)); BA-2 takes chunk 2's second beam's (4,8,9)
    assert ba2.stable_prefix(hyps((4, 8, 9, 1), (4, 5, 7))) == (4, 8, 9)
    ba3 = stream_policy(BeamAgreement(3))
    assert ba3.stable_prefix(hyps((1, 2, 3))) == ()
    assert ba3.stable_prefix(hyps((1, 9), (1, 2, 3, 4))) == ()
    # each earlier chunk limits it: chunk 1 holds (1,2,3) of (1,2,3,5), chunk 2 (1,2,3,4) holds it too
    assert ba3.stable_prefix(hyps((1, 2, 3, 5))) == (1, 2, 3)


def test_wait_k_schedule() -> None:
    policy = stream_policy(WaitK(2, tokens_per_chunk=2))
    best = (1, 2, 3, 4, 5, 6, 7)
    assert policy.stable_prefix(hyps(best)) == ()  # chunk 1 < k
    assert policy.stable_prefix(hyps(best)) == (1, 2)  # chunk 2: (2-2+1)*2
    assert policy.stable_prefix(hyps(best)) == (1, 2, 3, 4)
    assert policy.stable_prefix(hyps(best[:5])) == (1, 2, 3, 4, 5)


def test_offline_commits_nothing() -> None:
    assert stream_policy(Offline()).stable_prefix(hyps((1, 2, 3))) == ()


def test_factory_and_parsing() -> None:
    assert isinstance(make_policy(PolicyOptions.parse("la-2"), 1000), LocalAgreement)
    assert isinstance(make_policy(PolicyOptions.parse("hold-6"), 1000), HoldN)
    assert isinstance(make_policy(PolicyOptions.parse("SP-2"), 1000), SharedPrefix)
    assert isinstance(make_policy(PolicyOptions.parse("ba-2"), 1000), BeamAgreement)
    assert isinstance(make_policy(PolicyOptions.parse("offline"), 1000), Offline)
    wait = make_policy(PolicyOptions.parse("wait-3"), 1000)
    assert isinstance(wait, WaitK) and wait.k == 3 and wait.tokens_per_chunk == 3
    assert str(PolicyOptions.parse("la2")) == "la-2"
    for bad in ("la", "la-0", "foo-2", "hold--1", "", "sp-x"):
        with pytest.raises(OptionError):
            PolicyOptions.parse(bad)
    with pytest.raises(OptionError):
        stream_policy(HoldN(-1))
    with pytest.raises(OptionError):
        stream_policy(LocalAgreement(0))


token_lists = st.lists(st.integers(1, 4), max_size=8).map(tuple)


@given(st.lists(st.lists(token_lists, min_size=1, max_size=3), min_size=1, max_size=6), st.integers(1, 3))
def test_la_sp_and_ba_return_nested_prefixes_of_the_best_hypothesis(chunks: list[list[tuple[int, ...]]],
                                                                      n: int) -> None:
    la, sp, ba = stream_policy(LocalAgreement(n)), stream_policy(SharedPrefix(n)), stream_policy(BeamAgreement(n))
    greedy = stream_policy(BeamAgreement(n))
    for beams in chunks:
        best = beams[0]
        stable = {name: policy.stable_prefix(hyps(*beams)) for name, policy in (("la", la), ("sp", sp), ("ba", ba))}
        for prefix in stable.values():
            assert best[: len(prefix)] == prefix
        # SP-n agrees with every beam, LA-n with the best ones, BA-n with one beam of each chunk
        assert len(stable["sp"]) <= len(stable["la"]) <= len(stable["ba"])
        assert greedy.stable_prefix(hyps(best)) == stable["la"]  # one beam: BA-n is LA-n


def test_wait_k_words_on_subwords() -> None:
    # wait-k over source words (a cascade's MT stage): target word i once k + i - 1 source words are committed.
    tok = ToyTokenizer(["<eos>", " a", "b", " c", " d"])
    best = hyps((1, 2, 3, 4))  # " ab", " c", " d": three words
    def prefix(source_words: int) -> tuple[int, ...]:
        return StreamPolicy(WaitKWords(2), tok, source_words).stable_prefix(best)
    assert prefix(1) == ()
    assert prefix(2) == (1, 2)  # one word, its subword included
    assert prefix(3) == (1, 2, 3)
    assert prefix(9) == (1, 2, 3, 4)
    assert isinstance(make_policy(PolicyOptions.parse("wait-2"), None), WaitKWords)
