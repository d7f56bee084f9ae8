"""Which documents may not answer a query: the query itself and its exact or near duplicates.

The corpus stage's dedup log has one row per removed record: ``removed_id`` was dropped as a
duplicate of ``kept_id`` (which normally stays in the corpus). Removed records are not indexed, so
for a query that is itself in the corpus the log mostly adds nothing; but a query can also be a
removed record (a query set built before deduplication, or from another collection), and then the
kept record it duplicates is in the index and must not count as a hit.

Both directions are handled by treating every log row as an undirected edge removed -- kept and
taking connected components: the duplicate group of a query is the component that contains it
(itself alone when the log does not mention it). Every member of the group is excluded from the
query's results and from its relevance judgments.
"""
from __future__ import annotations

from typing import Iterable


def duplicate_groups(dedup_log) -> dict[str, frozenset[str]]:
    """doc id -> its duplicate group (a frozenset including the id), for every id in the log."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:           # path compression
            parent[x], x = root, parent[x]
        return root

    if dedup_log is not None and dedup_log.height:
        for a, b in dedup_log.select("removed_id", "kept_id").iter_rows():
            if a is None or b is None:
                continue
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    members: dict[str, set[str]] = {}
    for x in list(parent):
        members.setdefault(find(x), set()).add(x)
    return {x: frozenset(members[find(x)]) for x in parent}


def exclusions(query_ids: Iterable[str], dedup_log) -> dict[str, frozenset[str]]:
    """query id -> the documents excluded from its results: itself plus its duplicate group."""
    groups = duplicate_groups(dedup_log)
    return {q: groups.get(q, frozenset()) | {q} for q in query_ids}
