"""`EvidenceDigestChain` gives exactly `generation_evidence_digest`, call after call."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactsim.harness.core.digests import EvidenceDigestChain, generation_evidence_digest
from compactsim.harness.core.errors import ContractError

_ids = st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=12)
_lps = st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**53), 2**53)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["extend", "rewrite", "cut"]), _ids, _ids, _lps), min_size=1, max_size=6))
def test_chain_equals_the_plain_digest(calls) -> None:
    chain = EvidenceDigestChain()
    context: list[int] = []
    for kind, fresh, sampled, lps in calls:
        if kind == "extend":
            prompt = context + fresh
        elif kind == "cut":
            prompt = context[: len(context) // 2] + fresh
        else:
            prompt = fresh
        assert chain.digest(prompt, sampled, lps) == generation_evidence_digest(prompt, sampled, lps)
        context = prompt + sampled


def test_extended_reports_a_prefix_continuation() -> None:
    chain = EvidenceDigestChain()
    chain.digest([1, 2], [3], [-0.5])
    assert not chain.extended
    chain.digest([1, 2, 3, 4], [5], [-0.5])
    assert chain.extended
    chain.digest([1, 2, 9], [5], [-0.5])  # a rewrite
    assert not chain.extended
    chain.digest([], [], [])
    assert not chain.extended


def test_chain_handles_long_rollouts_and_empty_pieces() -> None:
    r = random.Random(3)
    chain, context = EvidenceDigestChain(), []
    for _ in range(30):
        prompt = context + [r.randrange(2**31) for _ in range(r.randint(0, 50))]
        sampled = [r.randrange(500) for _ in range(r.randint(0, 3))]
        lps = [-r.random() for _ in sampled]
        assert chain.digest(prompt, sampled, lps) == generation_evidence_digest(prompt, sampled, lps)
        context = prompt + sampled


def test_an_overflowing_logprob_is_a_typed_error_as_before() -> None:
    with pytest.raises(ContractError) as exc:
        EvidenceDigestChain().digest([1], [2], [10**400])
    assert exc.value.code == "malformed_payload"
