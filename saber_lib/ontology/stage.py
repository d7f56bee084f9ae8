"""The ontology stage's tables and figure (what ``01_ontology`` shows beside the tree): topics with
several parents, the top-level areas, tree nodes and topics per depth."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from .tree import Ontology


def multi_parent_topics(ontology: Ontology) -> list[str]:
    """Urls of the topics with more than one distinct parent topic in the DAG."""
    parents: dict[int, set] = {}
    t = ontology.topic
    for v in range(1, ontology.n_nodes):
        parents.setdefault(int(t[v]), set()).add(int(t[ontology.parent[v]]))
    return sorted(ontology.topic_urls[k] for k, p in parents.items() if len(p) > 1)


def area_table(ontology: Ontology):
    """One row per top-level area: title, readable name, domain, tree nodes below it (incl.), distinct topics."""
    rows = []
    for a in ontology.children(0).tolist():
        sub = ontology.topic[a:a + ontology.size[a]]
        rows.append({"area": ontology.title(a), "name": ontology.readable_title(a),
                     "domain": ontology.domain[a], "tree_nodes": int(ontology.size[a]),
                     "topics": int(len(np.unique(sub)))})
    return pl.DataFrame(rows, schema={"area": pl.Utf8, "name": pl.Utf8, "domain": pl.Utf8,
                                      "tree_nodes": pl.Int64, "topics": pl.Int64})


def depth_figure(ontology: Ontology):
    """Bars of the tree nodes and of the unique topics (counted at their shallowest copy) per depth."""
    depth_nodes = np.bincount(ontology.depth, minlength=ontology.max_depth + 1)
    first_depth = pl.DataFrame({"topic": ontology.topic, "depth": ontology.depth}).group_by("topic").agg(pl.col("depth").min())
    depth_topics = np.bincount(first_depth["depth"].to_numpy(), minlength=ontology.max_depth + 1)
    fig, ax = plt.subplots(figsize=(5, 3))
    x = np.arange(ontology.max_depth + 1)
    ax.bar(x - 0.2, depth_nodes, width=0.4, label="tree nodes")
    ax.bar(x + 0.2, depth_topics, width=0.4, label="topics (shallowest copy)")
    ax.set_xlabel("depth (root = 0)")
    ax.set_ylabel("count")
    ax.legend()
    return fig
