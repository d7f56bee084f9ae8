"""The corpus on the real reference data (skipped when the data folder is absent; a failure under CI).

Ground truth for restatements comes from the sources' own ids: miniF2F's ``mathd_algebra_N`` /
``mathd_numbertheory_N`` are MATH's ``test/algebra/N.json`` / ``test/number_theory/N.json`` and its
``aime_YEAR_pN`` / ``aimeI_YEAR_pN`` are AIME problems; the dedup never sees these ids.
"""
import re

import pytest

from conftest import needs_data
from saber_lib.core.config import SOURCES
from saber_lib.corpus import load_source
from saber_lib.corpus.dedup import near_cross_source

pytestmark = needs_data("sources")

# data/README.md (CHAMP: the package's 270 problems)
RAW = {"imo_proofbench": 60, "harp_proof": 310, "aime": 975, "olympiadbench": 675,
       "omni_math_rule": 2821, "math": 12500, "proofnet": 371, "minif2f": 488, "champ": 270}


@pytest.fixture(scope="module")
def loads():
    return {s: load_source(s, None) for s in SOURCES}


def test_real_raw_counts(loads):
    assert {s: ld.raw for s, ld in loads.items()} == RAW
    assert sum(ld.raw for ld in loads.values()) == 18470
    for ld in loads.values():
        assert ld.raw == len(ld.records) + len(ld.quarantine)


def test_real_aime_labels_match_by_uid(loads):
    aime = loads["aime"]
    # 958 of 975 AIME problems have an AoPS subject label (17 uids are absent from the label file)
    assert sum(r["source_subject"] is not None for r in aime.records) == 958
    assert {r["source_id"] for r in aime.records} >= {"2023/AIME_I/15", "2023/AIME_II/15", "1983/AIME/1"}


def _ground_truth(loads):
    pairs = []
    for r in loads["minif2f"].records:
        sid = r["source_id"]
        if m := re.fullmatch(r"mathd_(algebra|numbertheory)_(\d+)", sid):
            subj = {"algebra": "algebra", "numbertheory": "number_theory"}[m.group(1)]
            pairs.append((r["doc_id"], f"math:test/{subj}/{m.group(2)}.json"))
        elif m := re.fullmatch(r"aime_(\d+)_p(\d+)", sid):
            pairs.append((r["doc_id"], f"aime:{m.group(1)}/AIME/{m.group(2)}"))
        elif m := re.fullmatch(r"aime(I+)_(\d+)_p(\d+)", sid):
            pairs.append((r["doc_id"], f"aime:{m.group(2)}/AIME_{m.group(1)}/{m.group(3)}"))
    return pairs


def test_real_minif2f_restatements_are_caught(loads):
    by_id = {r["doc_id"]: r for s in ("aime", "math", "minif2f") for r in loads[s].records}
    pairs = [(a, b) for a, b in _ground_truth(loads) if b in by_id]
    assert len(pairs) >= 280
    # the counterparts, a slice of unrelated MATH problems as distractors, and the miniF2F items
    targets = {b for _, b in pairs}
    distract = [r for r in loads["math"].records if r["doc_id"] not in targets][:1500]
    records = [by_id[b] for b in sorted(targets)] + distract + [by_id[a] for a, _ in pairs]
    res = near_cross_source(records, ["aime", "math", "minif2f"], 5, 14, 8, 1, 0.5, True)
    log = {e["removed_id"]: e["kept_id"] for e in res.log}
    caught = sum(log.get(a) == b for a, b in pairs)
    assert caught / len(pairs) >= 0.97, (caught, len(pairs))
    # nothing outside miniF2F was removed: MATH and AIME come first in this priority order,
    # and no removed item points to a distractor
    assert {e["removed_source"] for e in res.log} <= {"minif2f"}
    assert not set(log.values()) & {r["doc_id"] for r in distract}
