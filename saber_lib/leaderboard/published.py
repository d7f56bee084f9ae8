"""The SABER-Math authors' result layout (read and write) and workbench runs, as score matrices.

Evaluation file (``evaluation/<model>__p<k>.json``)::

    {"domains": [[domain, ...] x n_queries],            # in query order
     "query_ids": [...]                                 # optional (not in the authors' files)
     "reports": {NAME: {"model", "processor", "dcg_variant", "k",
                        "tasks": [{"task", "ndcg_at_k", "branches": [{"branch", "ndcg_at_k"}]}],
                        "ndcgs_by_task": {task: [float | null] x n_queries},
                        "prompt": {...}}}}

``null`` is a query that was not scored; stored means are the plain mean over the scored queries
(per domain: the queries whose domain list holds the domain, so a multi-domain query counts in
each of its domains). A report with ``error`` and no ``ndcgs_by_task`` is a failed run: it is
skipped and listed in :attr:`PublishedDir.skipped`. Without ``query_ids`` the query ids are the
row indices as strings (``"0" .. "999"``), which are the released benchmark's ids.

Confidence file (``confidence/<NAME>.json``): ``{"k", "tasks": [{"task", "confidence_interval":
[lo, hi], "mean", "branches": [{"branch", "confidence_interval", "mean"}]}]}``: each interval within
[0, 1] holding its mean, each task and branch once, each mean that of the system's evaluation file
(where there is one) within :data:`AGREEMENT_TOL`.

Workbench run: ``<run>/evaluate/ndcg.parquet`` with ``retriever``, ``setting``, ``query_id``,
``ndcg``; one system per retriever, a setting is a task.

Query ids are compared in canonical form (:func:`canonical_query_id`): integers and strings of
decimal digits become the decimal string (``7``, ``"7"`` and ``"007"`` are all ``"7"``), other
strings stay as they are.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from saber_lib.core.data import NotAFile, regular_file, strict_json_loads

# check_stored_means lives with the means it recomputes and is read here too, as pub.check_stored_means
from .scopes import OVERALL, canonical_query_id, check_stored_means, means_by_scope, ordered_domains  # noqa: F401

TASKS = ("statement-statement", "statement-full", "full-full")
CUTOFF, GAIN = 10, "exponent"  # the ranked metric (the authors' nDCG@10, gain 2^rel - 1); others are refused


class LayoutError(ValueError):
    """A result file whose layout does not match; the message names the file and the field."""


@dataclass
class System:
    """One system's per-query nDCG for each task, on a fixed list of queries.

    ``scores[task]`` is a float array aligned with ``query_ids`` and ``domains``; NaN = not scored.
    ``stored[task]`` holds the means the source file stored (``Overall`` and per domain), if any.
    """

    name: str
    source: str
    query_ids: list[str]
    domains: list[list[str]]
    scores: dict[str, np.ndarray]
    stored: dict[str, dict[str, float]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def domain_names(self) -> list[str]:
        return ordered_domains(self.domains)


@dataclass
class PublishedDir:
    systems: list[System]
    confidence: dict[str, dict[str, dict[str, dict]]]   # system -> task -> scope -> {low, high, mean}
    skipped: list[str]
    files: list[str]


def _fail(path, fld, msg):
    raise LayoutError(f"{path}: field '{fld}': {msg}")


def _need(obj, key, typ, path, where):
    if not isinstance(obj, dict) or key not in obj:
        _fail(path, f"{where}{key}", "missing")
    v = obj[key]
    if not isinstance(v, typ) or isinstance(v, bool) and typ is not bool:
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        _fail(path, f"{where}{key}", f"expected {tn}, got {type(v).__name__}")
    return v


def regular(path, what: str = "file") -> Path:
    """``path`` when a regular file is there (:func:`saber_lib.core.data.regular_file`: a FIFO is never
    opened, so never waited on); else one :class:`LayoutError` naming it as what it is, or as not found."""
    try:
        return regular_file(path, what)
    except NotAFile as e:
        raise LayoutError(str(e)) from None
    except FileNotFoundError:
        raise LayoutError(f"{path}: file not found") from None


def _load_json(path: Path):
    try:  # strict: a key twice in one object, NaN / Infinity are errors (readers differ on them)
        return strict_json_loads(regular(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LayoutError(f"{path}: file not found") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, AmbiguousJSON
        raise LayoutError(f"{path}: not valid JSON ({e})") from None


def _check_metric(obj, path, where, k, gain):
    """A declared cut-off (``k``) or gain (``dcg_variant``, in a report) must be the ranked metric's."""
    if _need(obj, "k", int, path, where) != k:
        _fail(path, f"{where}k", f"declares nDCG@{obj['k']}, the leaderboard ranks nDCG@{k}")
    if where and "dcg_variant" in obj and _need(obj, "dcg_variant", str, path, where) != gain:
        _fail(path, f"{where}dcg_variant", f"declares the {obj['dcg_variant']!r} gain, the leaderboard ranks {gain!r}")


# ----------------------------------------------------------------------------- evaluation files
def read_evaluation_file(path, k: int = CUTOFF, gain: str = GAIN) -> tuple[list[System], list[str]]:
    """Systems of one evaluation file, plus notes on failed reports that were skipped.

    Every field used is validated; a bad layout raises :class:`LayoutError` naming the file and
    the field (e.g. ``reports.bm25.ndcgs_by_task.statement-full[17]``), as does another ``k`` or gain.
    """
    path = Path(path)
    data = _load_json(path)
    if not isinstance(data, dict):
        _fail(path, "<top level>", f"expected an object, got {type(data).__name__}")
    domains = _need(data, "domains", list, path, "")
    for i, ds in enumerate(domains):
        if not isinstance(ds, list) or not all(isinstance(d, str) for d in ds):
            _fail(path, f"domains[{i}]", "expected a list of domain names")
    n = len(domains)
    if "query_ids" in data:
        qids = _need(data, "query_ids", list, path, "")
        if len(qids) != n:
            _fail(path, "query_ids", f"{len(qids)} ids for {n} queries")
        qids = [canonical_query_id(q) for q in qids]
        if len(set(qids)) != n:
            _fail(path, "query_ids", "duplicate ids")
    else:
        qids = [str(i) for i in range(n)]
    reports = _need(data, "reports", dict, path, "")
    if not reports:
        _fail(path, "reports", "empty")
    systems, skipped = [], []
    for name, rep in reports.items():
        where = f"reports.{name}."
        if not isinstance(rep, dict):
            _fail(path, f"reports.{name}", "expected an object")
        if "error" in rep and "ndcgs_by_task" not in rep:
            skipped.append(f"{path.name}: {name}: failed report ({str(rep['error'])[:80]})")
            continue
        _check_metric(rep, path, where, k, gain)
        by_task = _need(rep, "ndcgs_by_task", dict, path, where)
        if not by_task:
            _fail(path, f"{where}ndcgs_by_task", "empty")
        scores = {}
        for task, vals in by_task.items():
            fld = f"{where}ndcgs_by_task.{task}"
            if not isinstance(vals, list):
                _fail(path, fld, f"expected a list, got {type(vals).__name__}")
            if len(vals) != n:
                _fail(path, fld, f"{len(vals)} values for {n} queries (length of 'domains')")
            arr = np.empty(n, dtype=np.float64)
            for i, v in enumerate(vals):
                if v is None:
                    arr[i] = np.nan
                elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0.0 <= v <= 1.0 + 1e-9:
                    arr[i] = float(v)
                else:
                    _fail(path, f"{fld}[{i}]", f"expected null or a number in [0, 1], got {v!r}")
            scores[task] = arr
        stored = {}
        for j, t in enumerate(_need(rep, "tasks", list, path, where)):
            tw = f"{where}tasks[{j}]."
            task = _need(t, "task", str, path, tw)
            st = {OVERALL: float(_need(t, "ndcg_at_k", (int, float), path, tw))}
            for b, br in enumerate(_need(t, "branches", list, path, tw)):
                bw = f"{tw}branches[{b}]."
                st[_need(br, "branch", str, path, bw)] = float(_need(br, "ndcg_at_k", (int, float), path, bw))
            stored[task] = st
        meta = {key: rep.get(key) for key in ("model", "processor", "dcg_variant", "prompt", "n_done", "n_total")
                if key in rep}
        meta["k"] = rep["k"]
        systems.append(System(name=str(name), source=str(path), query_ids=list(qids),
                              domains=[list(d) for d in domains], scores=scores, stored=stored, meta=meta))
    return systems, skipped


# ----------------------------------------------------------------------------- confidence files
# the authors' bootstrap means lie within 2e-4 of the plain means of their evaluation files: a larger
# gap is a confidence file of other results (or an edited one)
AGREEMENT_TOL = 1e-3


def read_confidence_file(path, k: int = CUTOFF, evaluation: System | None = None) -> dict[str, dict[str, dict]]:
    """``task -> scope -> {"low", "high", "mean"}`` from an authors' confidence file (of nDCG@``k``).

    Checked: every interval within ``[0, 1]`` holding its mean, each task once and each branch once
    per task, and, with ``evaluation`` (the same system's per-query values), every mean within
    :data:`AGREEMENT_TOL` of the plain mean the evaluation file gives. A :class:`LayoutError` names the
    file and the field."""
    path = Path(path)
    data = _load_json(path)
    if isinstance(data, dict) and "k" in data:
        _check_metric(data, path, "", k, GAIN)
    out: dict[str, dict[str, dict]] = {}
    seen: dict[str, str] = {}
    for j, t in enumerate(_need(data, "tasks", list, path, "")):
        tw = f"tasks[{j}]."
        task = _need(t, "task", str, path, tw)
        if task in seen:
            _fail(path, f"{tw}task", f"{task!r} already listed as {seen[task]}")
        seen[task] = f"tasks[{j}]"
        out[task] = {OVERALL: _interval(t, path, tw)}
        branches: dict[str, str] = {}
        for b, br in enumerate(_need(t, "branches", list, path, tw)):
            bw = f"{tw}branches[{b}]."
            name = _need(br, "branch", str, path, bw)
            if name in branches or name == OVERALL:
                _fail(path, f"{bw}branch", f"{name!r} already listed as {branches.get(name, tw + 'mean')}")
            branches[name] = f"{tw}branches[{b}]"
            out[task][name] = _interval(br, path, bw)
        if evaluation is not None and task in evaluation.scores:
            _check_agreement(path, tw, task, out[task], evaluation)
    return out


def _interval(obj, path, where):
    ci = _need(obj, "confidence_interval", list, path, where)
    if (len(ci) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in ci)
            or not 0 <= ci[0] <= ci[1] <= 1):
        _fail(path, f"{where}confidence_interval", f"expected [low, high] within [0, 1] (low <= high), got {ci!r}")
    mean = _need(obj, "mean", (int, float), path, where)
    if not 0 <= mean <= 1:
        _fail(path, f"{where}mean", f"{mean!r} is not an nDCG (not in [0, 1])")
    if not ci[0] <= mean <= ci[1]:
        _fail(path, f"{where}mean", f"{mean!r} lies outside its confidence_interval {ci!r}")
    return {"low": float(ci[0]), "high": float(ci[1]), "mean": float(mean)}


def _check_agreement(path, where: str, task: str, scopes: dict[str, dict], evaluation: System) -> None:
    """Each scope's mean against the plain mean of the evaluation file's per-query values."""
    plain = means_by_scope(evaluation.scores[task], evaluation.domains, [s for s in scopes if s != OVERALL])
    for j, (scope, iv) in enumerate(scopes.items()):
        got = plain[scope]
        if math.isnan(got) or abs(got - iv["mean"]) <= AGREEMENT_TOL:
            continue
        fld = f"{where}mean" if scope == OVERALL else f"{where}branches[{j - 1}].mean"
        _fail(path, fld, f"{iv['mean']!r} for {task}/{scope}, but the per-query values of "
                         f"{Path(evaluation.source).name} give {got!r} (more than {AGREEMENT_TOL:g} apart): "
                         f"the two files do not describe the same results")


def read_published_dir(path, check_means: bool = True) -> PublishedDir:
    """Every ``evaluation/*.json`` (and ``confidence/*.json``, matched by system name) under ``path``.

    All files must describe the same queries (same ``domains`` and query ids); with
    ``check_means`` a stored mean the per-query values do not reproduce to 1e-12 is an error.
    """
    path = Path(path)
    ev = sorted((path / "evaluation").glob("*.json")) if (path / "evaluation").is_dir() else []
    if not ev:
        raise LayoutError(f"{path}: no evaluation/*.json result files")
    systems, skipped, files = [], [], []
    ref = None
    for f in ev:
        ss, sk = read_evaluation_file(f)
        skipped += sk
        files.append(str(f))
        for s in ss:
            if ref is None:
                ref = s
            elif s.query_ids != ref.query_ids or s.domains != ref.domains:
                raise LayoutError(f"{f}: field 'domains': the queries differ from those of {ref.source}")
            if any(s.name == o.name for o in systems):
                raise LayoutError(f"{f}: field 'reports.{s.name}': system already read from another file")
            if check_means:
                bad = check_stored_means(s)
                if bad:
                    raise LayoutError(f"{f}: field 'reports.{s.name}.tasks': {bad[0]}")
            systems.append(s)
    if not systems:
        raise LayoutError(f"{path}: no scored system in evaluation/*.json ({'; '.join(skipped)})")
    conf = {}
    cdir = path / "confidence"
    if cdir.is_dir():
        by_name = {s.name: s for s in systems}
        for f in sorted(cdir.glob("*.json")):
            conf[f.stem] = read_confidence_file(f, evaluation=by_name.get(f.stem))
            files.append(str(f))
    return PublishedDir(systems=systems, confidence=conf, skipped=skipped, files=files)


# ----------------------------------------------------------------------------- workbench runs
def read_run(run_dir, query_domains: Mapping[str, Sequence[str]] | None = None,
             tasks: Sequence[str] | None = None) -> list[System]:
    """One :class:`System` per retriever of ``<run_dir>/evaluate/ndcg.parquet``.

    ``query_domains`` maps query id -> domain list (ids compared in canonical form); a query it
    does not list has no domain (it counts in ``Overall`` only). Systems are named by retriever.
    ``tasks`` restricts the settings read. Queries are the run's own, sorted by id.
    """

    run_dir = Path(run_dir)
    f = run_dir / "evaluate" / "ndcg.parquet"
    if not f.exists():
        raise LayoutError(f"{f}: file not found (has the evaluate stage run?)")
    regular(f)
    try:
        df = pl.read_parquet(f)
    except Exception as e:  # polars raises several error types for a broken file
        raise LayoutError(f"{f}: not a readable Parquet file ({e})") from None
    for c in ("retriever", "setting", "query_id", "ndcg"):
        if c not in df.columns:
            raise LayoutError(f"{f}: field '{c}': column missing")
    df = df.with_columns(pl.col("query_id").map_elements(canonical_query_id, return_dtype=pl.Utf8),
                         pl.col("ndcg").cast(pl.Float64))
    if tasks is not None:
        df = df.filter(pl.col("setting").is_in(list(tasks)))
    if df.select("retriever", "setting", "query_id").is_duplicated().any():
        raise LayoutError(f"{f}: field 'query_id': a (retriever, setting, query) appears twice")
    bad = df.filter(pl.col("ndcg").is_not_null() & ~pl.col("ndcg").is_between(0.0, 1.0 + 1e-9))
    if bad.height:
        raise LayoutError(f"{f}: field 'ndcg': value {bad['ndcg'][0]!r} outside [0, 1]")
    qd = {canonical_query_id(k): list(v or ()) for k, v in (query_domains or {}).items()}
    qids = sorted(set(df["query_id"].to_list()), key=lambda q: (not q.isdigit(), int(q) if q.isdigit() else 0, q))
    pos = {q: i for i, q in enumerate(qids)}
    doms = [qd.get(q, []) for q in qids]
    out = []
    for r in df["retriever"].unique(maintain_order=True).to_list():
        sub = df.filter(pl.col("retriever") == r)
        scores = {}
        for t in sub["setting"].unique(maintain_order=True).to_list():
            g = sub.filter(pl.col("setting") == t)
            arr = np.full(len(qids), np.nan)
            idx = np.array([pos[q] for q in g["query_id"].to_list()], dtype=np.int64)
            arr[idx] = g["ndcg"].fill_null(float("nan")).to_numpy()
            scores[t] = arr
        out.append(System(name=str(r), source=str(run_dir), query_ids=list(qids), domains=doms,
                          scores=scores, meta={"run_dir": str(run_dir)}))
    if not out:
        raise LayoutError(f"{f}: no rows" + (f" for tasks {list(tasks)}" if tasks else ""))
    return out


def query_domains_of(system: System) -> dict[str, list[str]]:
    """query id -> domains of a system's queries (the published files give the released ones)."""
    return dict(zip(system.query_ids, system.domains))


def align(systems: Sequence[System], reference: System | None = None) -> list[System]:
    """The systems re-indexed on one list of queries.

    With ``reference`` (a published system: the released benchmark) the queries and domains are
    the reference's; every system's query ids must be among them (a query a system lacks is
    not scored, NaN), otherwise the system was not evaluated on the released benchmark and a
    :class:`LayoutError` names its source. Without a reference the queries are the union.
    """
    if not systems:
        return []
    if reference is not None:
        qids, doms = list(reference.query_ids), [list(d) for d in reference.domains]
    else:
        qids, doms, seen = [], [], {}
        for s in systems:
            for q, d in zip(s.query_ids, s.domains):
                if q not in seen:
                    seen[q] = len(qids)
                    qids.append(q)
                    doms.append(list(d))
    pos = {q: i for i, q in enumerate(qids)}
    out = []
    for s in systems:
        if s.query_ids == qids:
            out.append(System(s.name, s.source, qids, doms, dict(s.scores), dict(s.stored), dict(s.meta)))
            continue
        foreign = [q for q in s.query_ids if q not in pos]
        if foreign:
            raise LayoutError(
                f"{s.source}: field 'query_id': system {s.name} has {len(foreign)} query ids that are not "
                f"the released benchmark's (e.g. {foreign[0]!r}); only a run evaluated on the released "
                f"benchmark can be ranked beside the published results")
        idx = np.array([pos[q] for q in s.query_ids], dtype=np.int64)
        sc = {}
        for t, v in s.scores.items():
            a = np.full(len(qids), np.nan)
            a[idx] = v
            sc[t] = a
        out.append(System(s.name, s.source, qids, doms, sc, dict(s.stored), dict(s.meta)))
    return out


# ----------------------------------------------------------------------------- writer
def evaluation_record(name: str, scores: Mapping[str, Sequence[float]], domains: Sequence[Sequence[str]],
                      query_ids: Sequence[str] | None = None, k: int = 10, model: str | None = None,
                      processor: str = "saber-workbench", prompt: Mapping | None = None) -> dict:
    """An evaluation file in the authors' layout for one system (``null`` for NaN).

    Query ids other than ``"0" .. str(n-1)`` in order are written as an extra top-level
    ``query_ids`` list (the authors' files have none: their order is the released order).
    """
    n = len(domains)
    tasks, by_task = [], {}
    names = ordered_domains(domains)
    for task, vals in scores.items():
        v = np.asarray(vals, dtype=np.float64)
        if v.size != n:
            raise ValueError(f"task {task}: {v.size} values for {n} queries")
        m = means_by_scope(v, domains, names)
        tasks.append({"task": task, "ndcg_at_k": m[OVERALL],
                      "branches": [{"branch": d, "ndcg_at_k": m[d]} for d in names]})
        by_task[task] = [None if x != x else float(x) for x in v]
    rec: dict = {"domains": [list(d) for d in domains]}
    if query_ids is not None:
        q = [canonical_query_id(x) for x in query_ids]
        if q != [str(i) for i in range(n)]:
            rec["query_ids"] = q
    rec["reports"] = {name: {"model": model or name, "processor": processor, "dcg_variant": "exponent",
                             "k": int(k), "tasks": tasks, "ndcgs_by_task": by_task,
                             "prompt": dict(prompt) if prompt else {"key": "p0", "text": None}}}
    return rec


def write_evaluation_file(path, system: System, k: int | None = None, **kw) -> Path:
    """Write ``system`` as an authors'-layout evaluation file (``json.dump(..., indent=2)``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = evaluation_record(system.name, system.scores, system.domains, system.query_ids,
                            k=k or system.meta.get("k", 10), model=system.meta.get("model"), **kw)
    path.write_text(json.dumps(rec, indent=2))
    return path


def evaluation_file_from_run(run_dir, retriever: str, reference: System, out_path, k: int = 10) -> Path:
    """A run's retriever, aligned on the released queries of ``reference``, as an evaluation file
    ready to contribute (``<model>__p0.json``)."""
    systems = [s for s in read_run(run_dir, query_domains_of(reference)) if s.name == retriever]
    if not systems:
        raise LayoutError(f"{Path(run_dir) / 'evaluate' / 'ndcg.parquet'}: field 'retriever': no rows for {retriever!r}")
    (s,) = align(systems, reference)
    return write_evaluation_file(out_path, s, k=k)
