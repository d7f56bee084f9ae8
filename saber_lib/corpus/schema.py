"""The normalized corpus schema (SPEC section 1) and the mapping of source labels to the five domains.

Every loader yields records with exactly the columns of :data:`CORPUS_SCHEMA`:

    doc_id          "<source>:<source_id>"
    source          loader name (one of ``config.SOURCES``)
    source_id       the source's own id (string, unique within the source)
    problem         problem statement (non-empty)
    solution        first solution (non-empty)
    source_subject  the source's own subject label as plain text, or null
    source_level    the source's own difficulty label as text, or null
    license         licence of the source
    extra_solutions further solutions, in source order (list of strings, maybe empty)
    source_domain   ``source_subject`` mapped to one of ``config.DOMAINS``, or null when unmapped

Records that cannot be used go to the quarantine table (:data:`QUARANTINE_SCHEMA`) with the reason;
duplicates removed by :mod:`saber_lib.corpus.dedup` go to the dedup log (:data:`DEDUP_LOG_SCHEMA`).
"""
from __future__ import annotations

import polars as pl

from ..core.config import DOMAINS

CORPUS_SCHEMA: dict[str, pl.DataType] = {
    "doc_id": pl.Utf8,
    "source": pl.Utf8,
    "source_id": pl.Utf8,
    "problem": pl.Utf8,
    "solution": pl.Utf8,
    "source_subject": pl.Utf8,
    "source_level": pl.Utf8,
    "license": pl.Utf8,
    "extra_solutions": pl.List(pl.Utf8),
    "source_domain": pl.Utf8,
}

QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.Utf8,
    "file": pl.Utf8,      # path relative to the data directory (or the package resource)
    "record": pl.Utf8,    # "line N" / "row N" / "index N" / the source's id
    "reason": pl.Utf8,
}

DEDUP_LOG_SCHEMA: dict[str, pl.DataType] = {
    "removed_id": pl.Utf8,
    "removed_source": pl.Utf8,
    "kept_id": pl.Utf8,
    "kept_source": pl.Utf8,
    "rule": pl.Utf8,        # RULE_EXACT | RULE_NEAR
    "similarity": pl.Float64,  # 1.0 for exact duplicates; estimated Jaccard for near duplicates
    "removed_problem": pl.Utf8,   # the removed record's text, so that nothing disappears silently
    "removed_solution": pl.Utf8,
}

RULE_EXACT = "exact-within-source"
RULE_NEAR = "near-cross-source"

LICENSES = {
    "imo_proofbench": "CC BY 4.0",
    "harp_proof": "MIT (repository); text from the AoPS wiki",
    "aime": "MIT (repository); problems (c) MAA, solutions from the AoPS wiki",
    "olympiadbench": "MIT",
    "omni_math_rule": "not stated (upstream dataset card: Apache-2.0, unverified)",
    "math": "MIT",
    "proofnet": "MIT",
    "minif2f": "MIT",
    "champ": "MIT",
}

# --------------------------------------------------------------------------- source label -> domain
_ALG, _GEO, _NT, _COMB, _CA = DOMAINS

# MATH / AoPS / HARP style subject names (lower case, spaces and '&' folded to '_'/'and').
_AOPS_SUBJECTS = {
    "algebra": _ALG, "intermediate_algebra": _ALG, "prealgebra": _ALG,
    "counting_and_probability": _COMB, "geometry": _GEO, "number_theory": _NT,
    "precalculus": _CA, "calculus": _CA,
}
# Plain category names used by IMO-ProofBench, OlympiadBench and CHAMP.
_PLAIN = {
    "algebra": _ALG, "geometry": _GEO, "number theory": _NT, "number-theory": _NT,
    "combinatorics": _COMB,
    # CHAMP categories: inequalities, polynomials and sequences are algebra topics.
    "inequality": _ALG, "polynomial": _ALG, "sequence": _ALG,
}
# Omni-MATH: the area after "Mathematics -> " of the first domain path.
_OMNI_AREAS = {
    "algebra": _ALG, "geometry": _GEO, "number theory": _NT, "discrete mathematics": _COMB,
    "calculus": _CA, "precalculus": _CA,
}
# Omni-MATH "Applied Mathematics -> X": probability/statistics go to Combinatorics, as MathWorld's
# ProbabilityandStatistics does (data/README.md); word problems stay unmapped.
_OMNI_APPLIED = {"probability": _COMB, "statistics": _COMB}
# ProofNet books (data/README.md); Munkres (topology) and Putnam stay unmapped.
_PROOFNET_BOOKS = {
    "rudin": _CA, "pugh": _CA, "shakarchi": _CA,
    "artin": _ALG, "axler": _ALG, "dummit-foote": _ALG, "herstein": _ALG,
    "ireland-rosen": _NT,
}
# miniF2F: the subject embedded in names such as mathd_algebra_10, numbertheory_2dvd4expn.
_MINIF2F = {"algebra": _ALG, "numbertheory": _NT}


def _aops_key(label: str) -> str:
    return label.strip().lower().replace("&", "and").replace(" ", "_")


def source_domain(source: str, subject: str | None) -> str | None:
    """Map a source's own subject label to one of the five domains (None when unmapped).

    Tables follow data/README.md: MATH types (Algebra, Intermediate Algebra, Prealgebra -> Algebra;
    Counting & Probability -> Combinatorics; Precalculus -> Calculus and Analysis; ...), AoPS labels
    for AIME and HARP, Omni-MATH domain paths, OlympiadBench subfields, IMO-ProofBench categories,
    ProofNet books. CHAMP categories and miniF2F name prefixes are mapped the same way; a source
    registered by a plugin maps the plain category names.
    """
    if subject is None or not subject.strip():
        return None
    s = subject.strip()
    if source in ("math", "aime", "harp_proof"):
        return _AOPS_SUBJECTS.get(_aops_key(s))
    if source in ("imo_proofbench", "olympiadbench", "champ"):
        return _PLAIN.get(s.lower())
    if source == "omni_math_rule":
        first = s.split(";")[0].replace("->", ">")
        parts = [p.strip().lower() for p in first.split(">")]
        if parts and parts[0] == "mathematics":
            parts = parts[1:]
        if not parts:
            return None
        if parts[0] == "applied mathematics":
            return _OMNI_APPLIED.get(parts[1]) if len(parts) > 1 else None
        return _OMNI_AREAS.get(parts[0])
    if source == "proofnet":
        return _PROOFNET_BOOKS.get(s.lower())
    if source == "minif2f":
        return _MINIF2F.get(s.lower())
    return _PLAIN.get(s.lower())   # a plugin's source: plain category names (Algebra, Geometry, ...)


def empty_frame(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)
