"""Domain / subdomain distributions (paper App. A.5-A.6): pie charts of the corpus, of the
queries, and of one query's candidates.

Categories of a problem come from its topics (``topics/topics.parquet`` ``node_ids``) and the tree
(``ontology/nodes.parquet``): a topic node's *domain* is the node's ``domain``; its *subdomain* is
the second level of its path under the domain's area (the node at depth 2 on the path, e.g.
``NumberTheory > Congruences > ...`` gives ``Congruences``); a topic at the area itself (depth 1)
has the area as its subdomain. Topics outside the five domains, failed or empty annotations give
the category ``Unassigned``.

Weights: every problem has weight 1, split equally over its domains D (1/|D| each), and each
domain's share split equally over the problem's subdomains S_d in that domain::

    w(d) = 1/|D|          w(d, s) = 1/(|D| |S_d|)

so the subdomain ring nests inside the domain ring and both sum to the number of problems.
``flat_subdomain_weights`` gives the alternative 1/|S| over all of a problem's subdomains.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np
import polars as pl

from ..report import plots

UNASSIGNED = "Unassigned"


def node_categories(nodes: pl.DataFrame) -> dict[int, tuple[str, str]]:
    """node_id -> (domain, subdomain) for the tree nodes that lie under a domain (depth >= 1)."""
    out = {}
    for nid, depth, path, dom in nodes.select("node_id", "depth", "path", "domain").iter_rows():
        if dom is None or depth is None or depth < 1 or not path:
            continue
        off = len(path) - (depth + 1)          # 0 when the path includes the root's title
        area_i = 1 + off
        if area_i < 0 or area_i >= len(path):
            continue
        sub = path[area_i + 1] if depth >= 2 and area_i + 1 < len(path) else path[area_i]
        out[int(nid)] = (dom, sub)
    return out


def problem_categories(topics: pl.DataFrame, nodes: pl.DataFrame, doc_ids: Sequence[str] | None = None) -> dict[str, dict[str, set[str]]]:
    """doc_id -> {domain: {subdomains}} (``{UNASSIGNED: {UNASSIGNED}}`` when nothing maps).

    ``doc_ids`` restricts and orders the result; ids absent from ``topics`` are Unassigned.
    """
    cat = node_categories(nodes)
    by_doc: dict[str, dict[str, set[str]]] = {}
    cols = ["doc_id", "node_ids"] + (["failed"] if "failed" in topics.columns else [])
    for row in topics.select(cols).iter_rows():
        doc, nids = row[0], row[1]
        failed = bool(row[2]) if len(row) > 2 and row[2] is not None else False
        m: dict[str, set[str]] = defaultdict(set)
        if not failed:
            for n in nids or []:
                if int(n) in cat:
                    d, s = cat[int(n)]
                    m[d].add(s)
        by_doc[doc] = dict(m) if m else {UNASSIGNED: {UNASSIGNED}}
    if doc_ids is None:
        return by_doc
    return {d: by_doc.get(d, {UNASSIGNED: {UNASSIGNED}}) for d in doc_ids}


def category_weights(cats: dict[str, dict[str, set[str]]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(domain weights, subdomain weights) with the nested equal split of the module docstring.

    Returns ``domain, weight, n_problems`` and ``domain, subdomain, weight, n_problems``
    (``n_problems``: problems touching the category at all), sorted by weight descending.
    """
    dw: dict[str, float] = defaultdict(float)
    sw: dict[tuple[str, str], float] = defaultdict(float)
    dn: dict[str, int] = defaultdict(int)
    sn: dict[tuple[str, str], int] = defaultdict(int)
    for m in cats.values():
        nd = len(m)
        for d, subs in m.items():
            dw[d] += 1.0 / nd
            dn[d] += 1
            for s in subs:
                sw[(d, s)] += 1.0 / (nd * len(subs))
                sn[(d, s)] += 1
    dom = pl.DataFrame({"domain": list(dw), "weight": list(dw.values()), "n_problems": [dn[d] for d in dw]},
                       schema={"domain": pl.String, "weight": pl.Float64, "n_problems": pl.Int64})
    sub = pl.DataFrame({"domain": [k[0] for k in sw], "subdomain": [k[1] for k in sw], "weight": list(sw.values()),
                        "n_problems": [sn[k] for k in sw]},
                       schema={"domain": pl.String, "subdomain": pl.String, "weight": pl.Float64, "n_problems": pl.Int64})
    return (dom.sort(["weight", "domain"], descending=[True, False]),
            sub.sort(["domain", "weight", "subdomain"], descending=[False, True, False]))


def flat_subdomain_weights(cats: dict[str, dict[str, set[str]]]) -> pl.DataFrame:
    """Alternative split: 1/|S| over all (domain, subdomain) categories of a problem."""
    sw: dict[tuple[str, str], float] = defaultdict(float)
    for m in cats.values():
        pairs = [(d, s) for d, subs in m.items() for s in subs]
        for p in pairs:
            sw[p] += 1.0 / len(pairs)
    return pl.DataFrame({"domain": [k[0] for k in sw], "subdomain": [k[1] for k in sw], "weight": list(sw.values())},
                        schema={"domain": pl.String, "subdomain": pl.String, "weight": pl.Float64}) \
        .sort(["domain", "weight", "subdomain"], descending=[False, True, False])


def pick_query(ratings: pl.DataFrame, index: int) -> str:
    """The ``index``-th query id in sorted order (the example of the candidates pie)."""
    qids = sorted(ratings["query_id"].unique().to_list())
    if not qids:
        raise ValueError("no rated queries")
    if index >= len(qids):
        raise ValueError(f"distributions.example_query = {index} but there are only {len(qids)} queries")
    return qids[index]


def top_ranked(ratings: pl.DataFrame, query_id: str, k: int = 10) -> list[str]:
    """The query's k highest-rated candidates (ties by position)."""
    return (ratings.filter(pl.col("query_id") == query_id).sort(["rating", "position"], descending=[True, False])
            ["cand_id"].head(k).to_list())


# ----------------------------------------------------------------------------- figures
def candidate_distribution(topics: pl.DataFrame, nodes: pl.DataFrame, bench: pl.DataFrame,
                           ratings: pl.DataFrame, query_index: int, top_k: int = 10) -> dict:
    """One query's candidates by domain and subdomain (appendix A.6).

    Returns ``query_id``, ``cand_ids`` (benchmark order), ``query_categories``, ``domains`` and
    ``subdomains`` (weights of :func:`category_weights` over the candidates), ``top_weights``
    ({(domain, subdomain): weight of the query's ``top_k`` rated candidates there}), ``own`` (the
    query's own (domain, subdomain) pairs) and ``table``: ``subdomains`` plus the columns
    ``top{k}_weight`` and ``query_subdomain``.
    """
    qid = pick_query(ratings, query_index)
    cand_ids = bench.filter(pl.col("query_id") == qid).sort("position")["cand_id"].to_list()
    cand_cats = problem_categories(topics, nodes, cand_ids)
    dom, sub = category_weights(cand_cats)
    top = top_ranked(ratings, qid, top_k)
    _, top_sub = category_weights({c: cand_cats[c] for c in top})
    top_w = {(d, s_): w for d, s_, w in top_sub.select("domain", "subdomain", "weight").iter_rows()}
    q_cats = problem_categories(topics, nodes, [qid])[qid]
    own = {(d, s_) for d, subs in q_cats.items() for s_ in subs}
    keys = list(zip(sub["domain"].to_list(), sub["subdomain"].to_list()))
    table = sub.with_columns(pl.Series(f"top{top_k}_weight", [top_w.get(k, 0.0) for k in keys], dtype=pl.Float64),
                             pl.Series("query_subdomain", [k in own for k in keys], dtype=pl.Boolean))
    return {"query_id": qid, "cand_ids": cand_ids, "query_categories": q_cats, "domains": dom,
            "subdomains": sub, "top_weights": top_w, "own": own, "table": table}


def _domain_order(domains: Sequence[str]) -> list[str]:
    known = [d for d in plots.DOMAIN_ORDER if d in domains]
    return known + sorted(d for d in domains if d not in known)


def _shade(hex_color: str, k: int, n: int) -> tuple:
    import matplotlib.colors as mc  # only the pie charts need it

    rgb = np.array(mc.to_rgb(hex_color))
    t = 0.15 + 0.55 * (k / max(n - 1, 1))
    return tuple(rgb + (1 - rgb) * t)


def plot_pie(dom_w: pl.DataFrame, sub_w: pl.DataFrame, title: str = "", highlight_subs: set | None = None,
             top_subs: dict | None = None, ax=None, min_label_share: float = 0.03):
    """Two-ring pie: domains inside, subdomains outside (nested, same angular extent).

    ``highlight_subs``: (domain, subdomain) pairs drawn hatched (e.g. the query's own subdomains);
    ``top_subs``: (domain, subdomain) -> weight among the top-ranked candidates; those wedges get a
    black outline and the top-10 weight in their label. Small wedges (< ``min_label_share``) are
    not labelled.
    """
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 6.4))
    total = float(dom_w["weight"].sum())
    order = _domain_order(dom_w["domain"].to_list())
    dweights = {d: w for d, w in dom_w.select("domain", "weight").iter_rows()}
    inner_w = [dweights[d] for d in order]
    inner_c = [plots.DOMAIN_COLORS.get(d, "#BBBBBB") for d in order]
    outer_w, outer_c, outer_lab, outer_keys = [], [], [], []
    for d in order:
        s = sub_w.filter(pl.col("domain") == d)
        for k, (sub, w) in enumerate(s.select("subdomain", "weight").iter_rows()):
            outer_w.append(w)
            outer_c.append(_shade(plots.DOMAIN_COLORS.get(d, "#BBBBBB"), k, s.height))
            outer_lab.append(sub if w / total >= min_label_share else "")
            outer_keys.append((d, sub))
    inner_lab = [d.replace(" and ", " and\n") + f"\n{w / total:.0%}" if w / total >= min_label_share else ""
                 for d, w in zip(order, inner_w)]
    wedges_in, _ = ax.pie(inner_w, radius=0.62, colors=inner_c, startangle=90, counterclock=False, labels=inner_lab,
                          # the middle of the ring (0.20 .. 0.62), not near its inner edge where labels collide
                          labeldistance=0.66, textprops={"fontsize": 7, "ha": "center", "va": "center"},
                          wedgeprops={"width": 0.42, "edgecolor": "white", "linewidth": 0.8})
    wedges_out, _ = ax.pie(outer_w, radius=1.0, colors=outer_c, startangle=90, counterclock=False,
                           labels=outer_lab, labeldistance=1.04, textprops={"fontsize": 6},
                           wedgeprops={"width": 0.38, "edgecolor": "white", "linewidth": 0.5})
    for wedge, key in zip(wedges_out, outer_keys):
        if highlight_subs and key in highlight_subs:
            wedge.set_hatch("////")
            wedge.set_edgecolor("#333333")
        if top_subs and top_subs.get(key, 0) > 0:
            wedge.set_edgecolor("black")
            wedge.set_linewidth(1.6)
            wedge.set_label(None)
    if top_subs:
        for wedge, key, lab in zip(wedges_out, outer_keys, outer_lab):
            if top_subs.get(key, 0) > 0:
                ang = np.deg2rad((wedge.theta1 + wedge.theta2) / 2)
                ax.text(0.81 * np.cos(ang), 0.81 * np.sin(ang), f"{top_subs[key]:.1f}", fontsize=6,
                        ha="center", va="center", fontweight="bold",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})  # readable on hatching
    notes = []
    if highlight_subs:
        notes.append("hatched: the query's own subdomains")
    if top_subs:
        notes.append("black outline, number: weight of the top-ranked candidates")
    if notes:
        ax.text(0.5, -0.02, "; ".join(notes), transform=ax.transAxes, ha="center", va="top", fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.set(aspect="equal")
    return ax
