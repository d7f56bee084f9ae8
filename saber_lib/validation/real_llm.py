"""What a real model did with the workbench's prompts, measured from a cassette (``saber_lib.llm.cassette``).

Works on the recorded answers alone, so a replayed run reports the same numbers as the run that
recorded them:

* :func:`template_table` - per prompt template: requests, call errors, parse failures (count and
  rate, each answer read again with the template's own parser), retries, mean / p95 seconds per
  call, mean prompt and answer tokens.
* :func:`judge_orders` / :func:`judge_summary` - the log-probability judge per pair and order:
  agreement between the two orders, share of "first" verdicts (position bias) and the verdict over
  both orders (summed margins, as ``llm.logprob_pairwise``); :func:`judge_agreement` compares those
  verdicts with other judges (e.g. the USE and nomic proxy judges) on the same pairs.
* :func:`summary_answers` - word counts of the parsed core ideas and the share that parse.
* :func:`rating_by_group` - mean rating per candidate group under two judges.

A parse failure here is an answer the template's parser rejects, the first attempt and the retries
each counted (``retries``: requests with ``attempt`` > 0, majority votes not counted).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np
import polars as pl

from .. import prompts
from ..judging.registry import JudgeContext, build_judge
from ..judging.tournament import corpus_docs, run_tournament
from ..llm import load_cassette
from ..llm.types import ParseError
from ..summaries.summarize import SummaryValidator
from ..embed import EncoderUnavailable

VOTE_STRIDE = 1000  # a judge's vote k asks with attempt = 1000 * k (judging.judges.LLMJudge)


def parses(e: Mapping) -> tuple[bool, str | None]:
    """(answer usable, why not) for one cassette entry, by its template's own reading."""
    if e.get("error"):
        return False, f"call failed: {e['error']}"
    t = e.get("template")
    if e.get("logprobs_for"):
        lp = e.get("logprobs") or {}
        if all(lp.get(o) is None for o in e["logprobs_for"]):
            return False, "none of the options among the reported next tokens"
        return True, None
    if t not in prompts.FIELDS:
        return True, None  # no parser known (a request built without a template)
    meta = e.get("meta") or {}
    fields = {k: meta[k] for k in prompts.PARSER_FIELDS.get(t, ()) if k in meta}
    # summaries: as the stage reads them (the template's parser plus the no-equation rule)
    read = (SummaryValidator(int(fields.get("max_words", 30))) if t == "solution_summary"
            else prompts.parser(t, **fields))
    try:
        read(e.get("text") or "")
    except (ParseError, ValueError) as err:
        return False, str(err)
    return True, None


def template_table(entries: Iterable[Mapping]) -> pl.DataFrame:
    """One row per template (see the module docstring), sorted by template name."""
    rows: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for e in entries:
        r = rows[e.get("template") or "(none)"]
        ok, _ = parses(e)
        r["ok"].append(ok)
        r["error"].append(bool(e.get("error")))
        r["retry"].append(int(e.get("attempt") or 0) % VOTE_STRIDE > 0)
        r["s"].append(float(e.get("latency_s") or 0.0))
        r["pt"].append(int(e.get("prompt_tokens") or 0))
        r["ct"].append(int(e.get("completion_tokens") or 0))
    out = []
    for t in sorted(rows):
        r = rows[t]
        n = len(r["ok"])
        errors = sum(r["error"])
        bad = n - sum(r["ok"]) - errors
        s = np.asarray(r["s"])
        out.append({"template": t, "requests": n, "call_errors": errors, "parse_failures": bad,
                    "parse_failure_rate": bad / n, "retries": sum(r["retry"]),
                    "mean_s": float(s.mean()), "p95_s": float(np.percentile(s, 95)),
                    "prompt_tokens": float(np.mean(r["pt"])), "answer_tokens": float(np.mean(r["ct"]))})
    return pl.DataFrame(out, schema={"template": pl.String, "requests": pl.Int64, "call_errors": pl.Int64,
                                     "parse_failures": pl.Int64, "parse_failure_rate": pl.Float64,
                                     "retries": pl.Int64, "mean_s": pl.Float64, "p95_s": pl.Float64,
                                     "prompt_tokens": pl.Float64, "answer_tokens": pl.Float64})


def _order_margin(e: Mapping, first: str = "1", second: str = "2") -> float | None:
    lp = e.get("logprobs") or {}
    a, b = lp.get(first), lp.get(second)
    if e.get("error") or (a is None and b is None):
        return None
    return (-math.inf if a is None else a) - (-math.inf if b is None else b)


def judge_orders(entries: Iterable[Mapping], template: str = "pairwise_judge_logprob") -> pl.DataFrame:
    """One row per judged pair (both orders recorded): ``query_id``, ``a``, ``b`` (``a`` shown first
    in the first order seen), ``margin_ab`` / ``margin_ba`` (log P("1") - log P("2") in each order),
    ``first_ab`` / ``first_ba`` (that order chose its first-shown candidate), ``consistent`` (both
    orders chose the same candidate), ``verdict`` (``a`` | ``b`` | ``tie`` from the summed margins)."""
    seen: dict[tuple, dict] = {}
    order: list[tuple] = []
    for e in entries:
        meta = e.get("meta") or {}
        if e.get("template") != template or not e.get("logprobs_for") or "first" not in meta:
            continue
        if int(e.get("attempt") or 0) != 0:
            continue  # majority votes: the same pair asked again
        q, f, s = meta.get("query"), meta["first"], meta["second"]
        pair = (q, frozenset((f, s)))
        if pair not in seen:
            seen[pair] = {"query_id": q, "a": f, "b": s}
            order.append(pair)
        key = "ab" if seen[pair]["a"] == f else "ba"
        seen[pair].setdefault(f"margin_{key}", _order_margin(e))
    rows = []
    for pair in order:
        r = seen[pair]
        mab, mba = r.get("margin_ab"), r.get("margin_ba")
        if mab is None or mba is None:
            continue
        total = mab - mba  # evidence for a: a first in ab (+), a second in ba (-)
        verdict = "tie" if math.isnan(total) or total == 0 else "a" if total > 0 else "b"
        rows.append({"query_id": r["query_id"], "a": r["a"], "b": r["b"], "margin_ab": mab, "margin_ba": mba,
                     "first_ab": mab > 0, "first_ba": mba > 0, "consistent": (mab > 0) != (mba > 0),
                     "verdict": verdict})
    return pl.DataFrame(rows, schema={"query_id": pl.String, "a": pl.String, "b": pl.String,
                                      "margin_ab": pl.Float64, "margin_ba": pl.Float64, "first_ab": pl.Boolean,
                                      "first_ba": pl.Boolean, "consistent": pl.Boolean, "verdict": pl.String})


def judge_summary(orders: pl.DataFrame) -> dict:
    """Pairs judged in both orders, agreement between the orders, share of single-order verdicts that
    chose the first-shown candidate, share of ties over both orders."""
    n = orders.height
    if n == 0:
        return {"pairs": 0, "order_agreement": float("nan"), "first_share": float("nan"), "tie_share": float("nan")}
    firsts = orders["first_ab"].to_list() + orders["first_ba"].to_list()
    return {"pairs": n, "order_agreement": float(orders["consistent"].mean()),
            "first_share": sum(firsts) / len(firsts), "tie_share": float((orders["verdict"] == "tie").mean())}


def judge_agreement(orders: pl.DataFrame, docs: Mapping, judges: Mapping) -> pl.DataFrame:
    """Agreement of the recorded verdicts with each of ``judges`` (name -> a ``judging`` judge) on the
    same pairs: ``pairs`` compared (both decided, no tie), ``agree`` share."""
    items = [(docs[q], docs[a], docs[b]) for q, a, b in orders.select("query_id", "a", "b").iter_rows()]
    verdicts = orders["verdict"].to_list()
    rows = []
    for name, judge in judges.items():
        other = judge.judge_pairs(items) if items else []
        both = [(v, {1: "a", 2: "b"}.get(o)) for v, o in zip(verdicts, other) if v != "tie" and o in (1, 2)]
        rows.append({"judge": name, "pairs": len(both),
                     "agree": sum(v == o for v, o in both) / len(both) if both else float("nan")})
    return pl.DataFrame(rows, schema={"judge": pl.String, "pairs": pl.Int64, "agree": pl.Float64})


def summary_answers(entries: Iterable[Mapping]) -> dict:
    """First-attempt ``solution_summary`` answers: how many, share that parse, share with no core
    idea among those, mean and max words of the parsed core ideas."""
    n = parsed = no_core = 0
    words = []
    for e in entries:
        if e.get("template") != "solution_summary" or int(e.get("attempt") or 0) != 0:
            continue
        n += 1
        ok, _ = parses(e)
        if not ok:
            continue
        parsed += 1
        d = prompts.parser("solution_summary", max_words=(e.get("meta") or {}).get("max_words", 10 ** 6))(e["text"])
        if d["no_core_idea"] or not d["core_idea"]:
            no_core += 1
        else:
            words.append(len(d["core_idea"].split()))
    return {"answers": n, "parsed_share": parsed / n if n else float("nan"),
            "no_core_idea_share": no_core / parsed if parsed else float("nan"),
            "core_words_mean": float(np.mean(words)) if words else float("nan"),
            "core_words_max": int(max(words)) if words else 0}


def rating_by_group(ratings: pl.DataFrame, other: pl.DataFrame, names=("llm", "stand-in")) -> pl.DataFrame:
    """Mean rating per candidate group under two judges, on the (query, candidate) rows both rated."""
    both = ratings.select("query_id", "cand_id", "group", pl.col("rating").alias(names[0])).join(
        other.select("query_id", "cand_id", pl.col("rating").alias(names[1])), on=["query_id", "cand_id"])
    return (both.group_by("group").agg(pl.len().alias("candidates"), pl.col(names[0]).mean(), pl.col(names[1]).mean())
            .sort("group"))


def section_tables(entries: list[Mapping], *, docs: Mapping | None = None, judges: Mapping | None = None,
           ratings: pl.DataFrame | None = None, standin: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    """Every table of the section, by name: ``templates``, ``judge`` (order agreement, first share),
    ``judge_agreement`` (with ``judges`` on the judged pairs, texts from ``docs``), ``summaries``,
    ``rating_by_group`` (``ratings`` against a stand-in judge's ``standin`` ratings)."""
    orders = judge_orders(entries)
    out = {"templates": template_table(entries), "judge": pl.DataFrame([judge_summary(orders)])}
    if judges and docs is not None:
        out["judge_agreement"] = judge_agreement(orders, docs, judges)
    out["summaries"] = pl.DataFrame([summary_answers(entries)])
    if ratings is not None and standin is not None:
        out["rating_by_group"] = rating_by_group(ratings, standin)
    return out


def section_captions(llm: Mapping, backend, schedule: str, rounds: int) -> dict[str, str]:
    """Caption of each :func:`section_tables` table in the judge-validation stage: what the table holds, then
    which model answered, through which backend (for a replay, the backend that recorded it) and
    the clipping of texts in the prompts (``llm.text_max_words``)."""
    clip = llm.get("text_max_words", 0)
    where = (f"model {llm['model']} via {backend.name}"
             + (f" (recorded by {backend.describe()['llm_recorded_backend']})" if backend.name == "replay" else "")
             + (f"; judge, topic and summary prompts saw each problem and solution clipped to {clip} words (LaTeX "
                f"formatting: whole query statements)" if clip else ""))
    what = {
        "templates": "Per prompt template over the whole run: requests (retries included), call errors, answers the "
                     "template's parser rejects, retries, seconds per call (mean, p95), mean prompt and answer tokens",
        "judge": "Log-probability judge: pairs judged in both orders, share where both orders chose the same candidate, "
                 "share of single-order verdicts for the first-shown candidate (position bias), ties",
        "judge_agreement": "The judge's verdicts (summed over both orders) against proxy judges on the same pairs: "
                           "agreement over the pairs both decided (no tie); proxy:use-m embeds each whole problem and "
                           "solution (every chunk), proxy:nomic-embed their first 2,048 tokens",
        "summaries": "First-attempt core-idea summaries: share that parse, share without a core idea, words",
        "rating_by_group": f"Mean tournament rating per candidate group: the LLM judge vs a proxy:use-m tournament "
                           f"on the same queries ({schedule}, {rounds} rounds)",
    }
    return {name: f"{text}; {where}." for name, text in what.items()}


def real_llm_section(entries: list[Mapping], corpus: pl.DataFrame, bench: pl.DataFrame, ratings: pl.DataFrame, *,
                  params: Mapping, backend, judge_ctx: JudgeContext, store_dir) -> dict:
    """The judge-validation stage's real-model section from a cassette's ``entries``: the judge's
    verdicts against the USE and nomic proxy judges on the same pairs (full texts; nomic's first
    2,048 tokens), and the tournament's ratings
    against a USE proxy tournament on the rated queries (its rounds under ``store_dir``). ``params``:
    the notebook's parameters (``llm``, ``schedule``, ``rounds``, ``seed``, ``bt_alpha``,
    ``rating_top``); ``judge_ctx``: where the proxy judges are built (the judge registry). Returns ``tables`` (:func:`section_tables`), their ``captions`` and ``record`` (every
    table but ``templates``)."""
    orders = judge_orders(entries)
    full_docs = corpus_docs(corpus, set(orders["query_id"]) | set(orders["a"]) | set(orders["b"]) | set(bench["cand_id"]))
    proxies = {"proxy:use-m": build_judge("proxy:use-m", judge_ctx)}
    try:  # the second family of the robustness panel (llama.cpp); a workbench without its GGUF skips it
        proxies["proxy:nomic-embed"] = build_judge("proxy:nomic-embed", judge_ctx)
    except EncoderUnavailable as e:
        missing = str(e)
    else:
        missing = ""
    rated = bench.filter(pl.col("query_id").is_in(ratings["query_id"].unique().to_list()))
    standin = run_tournament(rated, full_docs, proxies["proxy:use-m"], schedule=params["schedule"], rounds=params["rounds"],
                             seed=params["seed"], store_dir=store_dir, alpha=params["bt_alpha"], top=params["rating_top"]).ratings
    tables = section_tables(entries, docs=full_docs, judges=proxies, ratings=ratings, standin=standin)
    captions = section_captions(params["llm"], backend, params["schedule"], params["rounds"])
    if missing:
        captions["judge_agreement"] += f" proxy:nomic-embed not compared: {missing}."
    return {"tables": tables, "captions": {name: captions[name] for name in tables},
            "record": {name: t.to_dicts() for name, t in tables.items() if name != "templates"}}


def stage_tables(ctx, corpus: pl.DataFrame, bench: pl.DataFrame, ratings: pl.DataFrame, *, params: Mapping, backend,
                 judge_ctx: JudgeContext) -> list:
    """The judge-validation stage's real-model section, from its notebook: what a real model did with
    every prompt of the run, read from the cassette the run records (``llm.record``) or a replayed
    run serves (``llm.cassette``), so both show the same numbers. Saves each table with its caption,
    records the section's facts (``real_llm``) and returns ``(name, table)`` pairs for the notebook;
    nothing without a cassette or a backend."""
    llm = params["llm"]
    cassette = llm.get("record") or (llm.get("cassette") if llm["backend"] == "replay" else None)
    if not cassette or backend is None:
        return []
    section = real_llm_section(load_cassette(cassette), corpus, bench, ratings, params=params, backend=backend,
                               judge_ctx=judge_ctx, store_dir=ctx.path("standin_rounds"))
    for name, table in section["tables"].items():
        ctx.save_table(table, f"real_llm_{name}", caption=section["captions"][name])
    ctx.record(real_llm=section["record"])
    return list(section["tables"].items())
