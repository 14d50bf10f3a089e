"""bm25 of a shard's hits, as the single store ranks them: the cross-shard search
merges by it (scores are per shard: each shard's term statistics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from projections import queries
from projections.lookup import rows_where_in

if TYPE_CHECKING:
    import apsw
    import duckdb

__all__ = ["bm25_of"]


def bm25_of(
    con: duckdb.DuckDBPyConnection,
    text: apsw.Connection | None,
    plan: queries.SearchPlan,
    ids: list[str],
) -> dict[str, float]:
    """Each of ``ids``' bm25 (summed over the plan's text terms, as the single
    store ranks them) in this shard's full-text index."""
    from projections.queries.fulltext import match_ranked
    from projections.queries.search import RANK_WEIGHTS

    assert text is not None
    seq_of = {
        r["seq"]: r["message_id"]
        for r in rows_where_in(con, "messages", "message_id", ids, "message_id, seq").to_pylist()
    }
    scores: dict[str, float] = {}
    for expression in plan.text.values():
        for seq, score in match_ranked(text, expression, RANK_WEIGHTS):
            mid = seq_of.get(seq)
            if mid is not None:
                scores[mid] = scores.get(mid, 0.0) + score
    return scores
