"""The full-text index's document keys: ordered by week, undated below every
dated key, a taken key's next candidate in the same week."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from projections.queries.fulltext import BUCKET, DATED, UNDATED, bucket_start, doc_key, next_key

seqs = st.integers(min_value=1, max_value=(1 << 40))
dates = st.integers(min_value=-(10**11), max_value=10**11)
WEEK = 7 * 24 * 3600


@given(seqs, dates, seqs, dates)
def test_keys_of_different_weeks_follow_their_dates(s1: int, d1: int, s2: int, d2: int) -> None:
    k1, k2 = doc_key(s1, d1), doc_key(s2, d2)
    assert k1 >= DATED and k2 >= DATED
    if d1 // WEEK < d2 // WEEK:
        assert k1 < k2
    if d1 // WEEK == d2 // WEEK:
        assert bucket_start(k1) == bucket_start(k2)


@given(seqs, dates)
def test_the_next_key_stays_in_the_week_and_undated_stay_below(seq: int, date: int) -> None:
    key = doc_key(seq, date)
    after = next_key(key)
    assert after != key and bucket_start(after) == bucket_start(key)
    last = bucket_start(key) + BUCKET - 1
    assert next_key(last) == bucket_start(key)  # (wraps within its week)
    undated = doc_key(seq, None)
    assert UNDATED <= undated < DATED and next_key(undated) == undated + 1
    assert bucket_start(undated) == UNDATED


def test_a_week_and_the_next() -> None:
    fifth_day = 4 * 24 * 3600  # weeks count from 1970-01-01 (not from a Monday)
    assert doc_key(7, 0) // BUCKET == 0 and doc_key(7, -1) // BUCKET == -1
    assert doc_key(7, WEEK - 1) < doc_key(3, WEEK) and doc_key(3, fifth_day) == 3
