"""MTEB against SABER-Math across systems: does a general retrieval leaderboard order the systems as
the mathematical benchmark does?

Inputs:

* an MTEB leaderboard snapshot (CSV; the authors committed one beside their results): a ``Model``
  column (a markdown link ``[name](url)`` or a plain name) and one score column per task type
  (``Retrieval``, ``Mean (Task)``, ...; an empty cell is a model without that score);
* the systems table (:data:`SYSTEMS_TABLE`, committed): per system its kind (``category``), whether
  it is of the newest generation (``recent``), and the exact MTEB row it is (``mteb_model``; empty:
  no row is the same model). Nothing is matched by likeness of names: a system the table does not
  name, or whose named row the snapshot lacks, is unmatched and listed;
* per system its overall mean nDCG@10 per setting (the published confidence files' ``mean``; a
  workbench run's plain mean over its scored queries).

Scopes of the correlation (each over the matched systems with a score in the column):

``all``
    every matched system, whatever its kind;
``embedding``
    single-vector embedding models only (``category`` = ``embedding``);
``recent``
    embedding models of the newest generation (``recent`` = ``yes``: released in 2025 or later).

Per (setting, scope, MTEB column): Spearman, Kendall's tau-b and Pearson with 95% percentile
intervals from resampling the systems (:mod:`saber_lib.metrics.correlation`, seeded per cell).

Reading the CSV: every row must have the header's number of fields, header names must be unique,
a score cell must be empty or a number in [0, 100] (a percentage); otherwise one error names the
file and line. The text is
read as UTF-8 (a byte-order mark dropped; bytes that are not UTF-8 are read as Latin-1, so a
mis-decoded cell such as the snapshot's ``Zero-shot`` warning sign never stops the reading: only
``Model`` and the score columns are interpreted).
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..core.csvfile import CSVHeaderError, csv_header
from ..core.seeds import rng_for
from ..metrics.correlation import COEFFICIENTS, correlations_with_intervals
from .published import LayoutError, regular

SYSTEMS_TABLE = Path(__file__).with_name("systems.csv")
MTEB_COLUMNS = ("Retrieval", "Mean (Task)")
SCORE_RANGE = (0.0, 100.0)   # MTEB's scores are percentages
SCOPES = ("all", "embedding", "recent")
CATEGORIES = ("lexical", "math-specific", "embedding", "late-interaction", "sparse", "reranker", "pipeline")
SOURCES = ("published", "workbench")
LINK = re.compile(r"^\[(?P<name>[^\]]+)\]\((?P<url>[^)]*)\)$")

CORRELATION_COLUMNS = {"task": pl.Utf8, "scope": pl.Utf8, "mteb_column": pl.Utf8, "n_systems": pl.Int64,
                       **{f"{c}{e}": pl.Float64 for c in COEFFICIENTS for e in ("", "_low", "_high")},
                       "n_resamples": pl.Int64, "systems": pl.Utf8}


# ----------------------------------------------------------------------------- CSV files
def read_csv_rows(path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and ``(line number, fields)`` of every non-empty row; one :class:`LayoutError` naming
    the file and line for a row of another width, a duplicate or empty header name, or broken quoting."""
    path = Path(path)
    try:
        raw = regular(path).read_bytes()   # a FIFO is refused, never opened
    except FileNotFoundError:
        raise LayoutError(f"{path}: file not found") from None
    except OSError as e:
        raise LayoutError(f"{path}: not readable ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows = []
    try:
        try:
            header = csv_header(reader, f"{path}: line 1")   # the one header reader: a column named twice is an error
        except CSVHeaderError as e:
            raise LayoutError(str(e)) from None
        if header is None:
            raise LayoutError(f"{path}: line 1: empty file (no header)")
        unnamed = [i + 1 for i, name in enumerate(header) if name == "" and i > 0]
        if unnamed:
            raise LayoutError(f"{path}: line 1: column {unnamed[0]} has no name")
        for fields in reader:
            if not fields or fields == [""]:
                continue
            if len(fields) != len(header):
                raise LayoutError(f"{path}: line {reader.line_num}: {len(fields)} fields, the header has {len(header)}")
            rows.append((reader.line_num, fields))
    except csv.Error as e:
        raise LayoutError(f"{path}: line {reader.line_num}: unreadable CSV row ({e})") from None
    return header, rows


def model_name(cell: str) -> str:
    """The model's name in a ``Model`` cell: the text of a markdown link ``[name](url)``, else the
    cell itself (stripped)."""
    s = cell.strip()
    m = LINK.match(s)
    return m.group("name").strip() if m else s


@dataclass
class MtebBoard:
    """A leaderboard snapshot: per model name its line in the file and its scores (None = empty)."""

    path: str
    scores: dict[str, dict[str, float | None]]
    lines: dict[str, list[int]]


def read_mteb(path, columns: Sequence[str] = MTEB_COLUMNS) -> MtebBoard:
    """The ``Model`` column and the score ``columns`` of an MTEB leaderboard CSV (see the module docstring)."""
    header, rows = read_csv_rows(path)
    missing = [c for c in ("Model", *columns) if c not in header]
    if missing:
        raise LayoutError(f"{path}: line 1: column(s) {missing} missing (columns: {', '.join(h for h in header if h)})")
    im = header.index("Model")
    ic = {c: header.index(c) for c in columns}
    scores: dict[str, dict] = {}
    lines: dict[str, list[int]] = {}
    for line, f in rows:
        name = model_name(f[im])
        if not name:
            raise LayoutError(f"{path}: line {line}: column 'Model' is empty")
        vals = {}
        for c, i in ic.items():
            cell = f[i].strip()
            if cell == "":
                vals[c] = None
                continue
            try:
                v = float(cell)
            except ValueError:
                raise LayoutError(f"{path}: line {line}: column {c!r}: {cell!r} is not a number") from None
            if not math.isfinite(v):
                raise LayoutError(f"{path}: line {line}: column {c!r}: {cell!r} is not a finite number")
            if not SCORE_RANGE[0] <= v <= SCORE_RANGE[1]:
                raise LayoutError(f"{path}: line {line}: column {c!r}: {cell} is outside [{SCORE_RANGE[0]:g}, "
                                  f"{SCORE_RANGE[1]:g}] (MTEB scores are percentages)")
            vals[c] = v
        lines.setdefault(name, []).append(line)
        scores.setdefault(name, vals)
    return MtebBoard(path=str(path), scores=scores, lines=lines)


# ----------------------------------------------------------------------------- the systems table
def read_systems_table(path=SYSTEMS_TABLE) -> dict[tuple[str, str], dict]:
    """``(source, system) -> {category, recent, mteb_model, note, line}`` from the committed table."""
    header, rows = read_csv_rows(path)
    want = ["source", "system", "category", "recent", "mteb_model", "note"]
    if header != want:
        raise LayoutError(f"{path}: line 1: expected the columns {want}, got {header}")
    out: dict[tuple[str, str], dict] = {}
    used: dict[str, int] = {}
    for line, (source, system, category, recent, mteb_model, note) in rows:
        key = (source.strip(), system.strip())
        if key[0] not in SOURCES:
            raise LayoutError(f"{path}: line {line}: source {source!r} is not one of {SOURCES}")
        if category not in CATEGORIES:
            raise LayoutError(f"{path}: line {line}: category {category!r} is not one of {CATEGORIES}")
        if recent not in ("", "yes", "no"):
            raise LayoutError(f"{path}: line {line}: recent {recent!r} is not 'yes', 'no' or empty")
        if key in out:
            raise LayoutError(f"{path}: line {line}: system {key[1]!r} ({key[0]}) already listed on line {out[key]['line']}")
        m = mteb_model.strip()
        if m and m in used:
            raise LayoutError(f"{path}: line {line}: MTEB row {m!r} is already the match of line {used[m]}")
        if m:
            used[m] = line
        out[key] = {"category": category, "recent": {"yes": True, "no": False}.get(recent), "mteb_model": m or None,
                    "note": note,
                    "line": line}
    return out


def matches(systems: Sequence[tuple[str, str, str]], board: MtebBoard | None, table: Mapping) -> pl.DataFrame:
    """One row per system (``(name, source, table key name)``): ``system``, ``mteb_model`` (null when
    unmatched), ``category``, ``recent``, ``status`` (``matched``, or why not)."""
    rows = []
    for name, source, key in systems:
        t = table.get((source, key))
        row = {"system": name, "mteb_model": None, "category": t["category"] if t else None,
               "recent": t["recent"] if t else None, "status": ""}
        if t is None:
            row["status"] = "not in the systems table"
        elif t["mteb_model"] is None:
            row["status"] = "no MTEB row is this model" + (f" ({t['note']})" if t["note"] else "")
        elif board is None or t["mteb_model"] not in board.scores:
            row["status"] = f"the table names {t['mteb_model']!r}, which this leaderboard file lacks"
        else:
            lines = board.lines[t["mteb_model"]]
            if len(lines) > 1:
                raise LayoutError(f"{board.path}: line {lines[1]}: model {t['mteb_model']!r} (matched to "
                                  f"{name}) appears again (first on line {lines[0]})")
            row.update(mteb_model=t["mteb_model"], status="matched")
        rows.append(row)
    return pl.DataFrame(rows, schema={"system": pl.Utf8, "mteb_model": pl.Utf8, "category": pl.Utf8,
                                      "recent": pl.Boolean, "status": pl.Utf8})


def in_scope(scope: str, category: str | None, recent: bool | None) -> bool:
    if scope == "all":
        return True
    if scope == "embedding":
        return category == "embedding"
    if scope == "recent":
        return category == "embedding" and bool(recent)
    raise ValueError(f"unknown scope {scope!r} (expected one of {SCOPES})")


def mteb_correlation_frame(match: pl.DataFrame, board: MtebBoard, quality: Mapping[str, Mapping[str, float]],
                      tasks: Sequence[str], n_resamples: int, seed: int, level: float = 0.95,
                      columns: Sequence[str] = MTEB_COLUMNS) -> pl.DataFrame:
    """Per (setting, scope, MTEB column): the three coefficients with their intervals over the matched
    systems of the scope with a score in the column and a mean in the setting (``quality[system][task]``)."""
    rows = []
    matched = match.filter(pl.col("status") == "matched")
    for task in tasks:
        for scope in SCOPES:
            for col in columns:
                names, x, y = [], [], []
                for r in matched.iter_rows(named=True):
                    v = board.scores[r["mteb_model"]][col]
                    q = quality.get(r["system"], {}).get(task)
                    if in_scope(scope, r["category"], r["recent"]) and v is not None and q is not None and q == q:
                        names.append(r["system"])
                        x.append(v)
                        y.append(q)
                res = correlations_with_intervals(np.array(x), np.array(y), n_resamples,
                                                  rng_for(seed, "mteb", task, scope, col), level)
                res.pop("n_resamples_defined")
                rows.append({"task": task, "scope": scope, "mteb_column": col, **res, "n_resamples": int(n_resamples),
                             "systems": ", ".join(names)})
    return pl.DataFrame(rows, schema=CORRELATION_COLUMNS)


# ----------------------------------------------------------------------------- figure
def mteb_scatter_figure(match: pl.DataFrame, board: MtebBoard, quality: Mapping[str, Mapping[str, float]], task: str,
                   corr: pl.DataFrame, columns: Sequence[str] = MTEB_COLUMNS):
    """One panel per MTEB column: each matched system's MTEB score (x) against its nDCG@10 in ``task``
    (y), labelled; newest-generation embedding models in one colour, older ones in another, other kinds
    as squares; lexical systems (no MTEB score) as dotted horizontal lines at their nDCG@10."""
    import matplotlib.pyplot as plt  # figures only

    fig, axes = plt.subplots(1, len(columns), figsize=(6.2 * len(columns), 5.2), squeeze=False)
    lexical = [(r["system"], quality.get(r["system"], {}).get(task)) for r in match.iter_rows(named=True)
               if r["category"] == "lexical" and quality.get(r["system"], {}).get(task) is not None]
    for ax, col in zip(axes[0], columns):
        for r in match.filter(pl.col("status") == "matched").iter_rows(named=True):
            v, q = board.scores[r["mteb_model"]][col], quality.get(r["system"], {}).get(task)
            if v is None or q is None:
                continue
            emb = r["category"] == "embedding"
            color = "#c44e52" if emb and r["recent"] else "#4c72b0" if emb else "#55a868"
            ax.scatter([v], [q], color=color, marker="o" if emb else "s", s=28, zorder=3)
            ax.annotate(r["system"], (v, q), fontsize=6.5, xytext=(3, 2), textcoords="offset points")
        for k, (name, q) in enumerate(sorted(lexical, key=lambda t: t[1])):   # labels alternate sides
            ax.axhline(q, color="#888888", linestyle=":", linewidth=0.8, zorder=1)
            ax.annotate(f"{name} (lexical)", (0.99 if k % 2 else 0.01, q), xycoords=("axes fraction", "data"),
                        fontsize=6, ha="right" if k % 2 else "left", va="bottom", color="#555555")
        c = corr.filter((pl.col("task") == task) & (pl.col("mteb_column") == col))
        lines = [f"{s}: n={n}, Spearman {_fmt(sp)} [{_fmt(lo)}, {_fmt(hi)}], Pearson {_fmt(p)}"
                 for s, n, sp, lo, hi, p in c.select("scope", "n_systems", "spearman", "spearman_low",
                                                     "spearman_high", "pearson").iter_rows()]
        ax.set_title("\n".join(lines), fontsize=7, loc="left")
        ax.set_xlabel(f"MTEB {col} ({Path(board.path).name})")
        ax.set_ylabel(f"SABER-Math nDCG@10, {task}")
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color="#c44e52", marker="o", linestyle="", label="embedding, recent"),
               plt.Line2D([], [], color="#4c72b0", marker="o", linestyle="", label="embedding, older"),
               plt.Line2D([], [], color="#55a868", marker="s", linestyle="", label="other kind"),
               plt.Line2D([], [], color="#888888", linestyle=":", label="lexical (no MTEB score)")]
    axes[0][0].legend(handles=handles, fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def _fmt(v) -> str:
    return "-" if v is None or v != v else f"{v:.2f}"
