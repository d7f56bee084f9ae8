"""Fault cases of ``saber plan``: hours that did not belong to the profile (the paper's 283,000
problems and LLM hours planned for the tiny profile, which has ~360 problems and no LLM), stages
without figures dropped in silence, figures files with wrong types, signs or non-finite values, and
flags too large for a number.

Old behaviour is given per test. The command runs as a real process (as a user runs it) on the
committed figures or on a copy edited here.
"""
import json
from pathlib import Path

import pytest

from conftest import needs_data, one_line_error as _one_line, saber_cli as saber

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "benchmarks" / "results" / "paper_scale.json"
TINY = ROOT / "params" / "tiny.yaml"
pytestmark = pytest.mark.pipeline        # the command line in real processes


def _rows(stdout: str) -> dict[str, str]:
    return {ln.split()[0]: ln for ln in stdout.splitlines() if ln.split()}


def _figures(tmp_path, edit) -> Path:
    fig = json.loads(FIGURES.read_text())
    edit(fig)
    p = tmp_path / "figures.json"
    p.write_text(json.dumps(fig))
    return p


def _tiny_problems() -> int:
    """The records the tiny profile's corpus reads (its sources, at most max_records_per_source each)."""
    from saber_lib.core.config import load_profile
    from saber_lib.corpus.loaders import load_source

    prof = load_profile(TINY)
    c = prof.section("corpus")
    return sum(len(load_source(s, None, c["max_records_per_source"]).records) for s in c["sources"])


# --------------------------------------------------------------------------- the profile's own sizes
@needs_data("sources")
def test_plan_of_the_tiny_profile_plans_its_own_sizes_and_no_llm():
    # old: 283,000 problems and 355 GPU-hours for a profile with ~360 problems and no LLM
    r = saber("plan", "--params", TINY, "--gpus", "1", "--judge-rate", "1")
    assert r.returncode == 0, r.stderr
    rows = _rows(r.stdout)
    n = _tiny_problems()
    assert n < 1000
    for stage in ("dedup", "topics", "summaries", "signals", "select"):
        assert f"{n:,} problems" in rows[stage], rows[stage]
    assert "80 judgments" in rows["tournament"]       # 5 queries x floor(3 x 3 / 2) x 4 rounds (tiny profile)
    # no stage calls an LLM under the tiny profile (no backend): no calls, no judge hours
    for stage in ("topics", "summaries", "tournament"):
        cells = rows[stage].split()
        assert cells[3] == "0" and cells[5] == "0.00", rows[stage]
    assert "LLM stages: none" in r.stdout
    total = rows["total"].split()
    assert total[1] == "0" and total[3] == "0.00"
    # below every measured size: extrapolated, and from which size
    assert f"extrapolated x{n / 28_300:#.3g} from 28,300" in rows["dedup"]


def test_plan_with_the_paper_corpus_marks_measured_and_extrapolated_rows():
    r = saber("plan", "--params", ROOT / "params" / "paper.yaml", "--gpus", "8", "--judge-rate", "1",
              "--problems", "283000")
    assert r.returncode == 0, r.stderr
    rows = _rows(r.stdout)
    proj = json.loads(FIGURES.read_text())["projection"]
    assert f"measured {min(proj['dedup']['sizes']):,}-283,000" in rows["dedup"]       # measured at full size
    top = max(proj["signals"]["sizes"])
    assert f"extrapolated x{283_000 / top:#.3g} from {top:,}" in rows["signals"]
    assert "LLM stages: summaries, topics, tournament" in r.stdout


@needs_data("sources")
def test_stages_without_figures_are_listed_not_dropped(tmp_path):
    # old: a figures file without the tournament planned the rest and said nothing of it; a file
    # with no stage at all printed "total 0.00 h, bounded by nothing" with exit 0
    fig = _figures(tmp_path, lambda f: [f["projection"].pop(s) for s in ("tournament", "tournament_swap")])
    r = saber("plan", "--params", ROOT / "params" / "paper.yaml", "--gpus", "8", "--judge-rate", "1", "--figures", fig)
    assert r.returncode == 0, r.stderr
    assert "tournament" not in _rows(r.stdout)
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("not planned (no rehearsal figures; not in the total): ") and "tournament" in last
    assert "ontology" in last and "judge_validation" in last
    empty = _figures(tmp_path, lambda f: f.update(projection={}))
    _one_line(saber("plan", "--params", TINY, "--gpus", "1", "--judge-rate", "1", "--figures", empty),
              "no stage has figures", code=2)


# --------------------------------------------------------------------------- bad figures: one line naming the key
@pytest.mark.parametrize("edit, key", [
    (lambda f: f["projection"]["tournament"].update(cpu_s_coef="fast"), "projection.tournament.cpu_s_coef"),
    (lambda f: f["projection"]["dedup"].update(cpu_s_coef=-1e-4), "projection.dedup.cpu_s_coef"),
    (lambda f: f["projection"]["evaluate"].update(llm_calls=-5), "projection.evaluate.llm_calls"),
    (lambda f: f["projection"]["summaries"].update(units=0), "projection.summaries.units"),
    (lambda f: f["projection"]["signals"].update(cpu_s_slope=1e308), "projection.signals.cpu_s_slope"),
    (lambda f: f["projection"]["select"].update(cpu_s_slope=-0.5), "projection.select.cpu_s_slope"),
    (lambda f: f["projection"]["topics"].update(unit="pages"), "projection.topics.unit"),
    (lambda f: f["projection"]["leaderboard"].update(sizes=[100, "x"]), "projection.leaderboard.sizes[1]"),
    (lambda f: f["projection"].update(evaluate=[1, 2]), "projection.evaluate"),
    (lambda f: f.update(projection=[1, 2]), "projection"),
])
def test_a_bad_figure_is_one_line_naming_its_key(tmp_path, edit, key):
    # old: tracebacks (TypeError, ZeroDivisionError, OverflowError, AttributeError), or negative hours
    # and the wrong bounding stage with exit 0
    fig = _figures(tmp_path, edit)
    msg = _one_line(saber("plan", "--params", TINY, "--gpus", "1", "--judge-rate", "1", "--figures", fig),
                    "--figures", key + ":", code=2)
    assert str(fig) in msg


@pytest.mark.parametrize("text", ["NaN", "Infinity"])
def test_a_non_finite_figure_is_one_line_naming_its_key(tmp_path, text):
    # old: NaN hours (and a NaN total) with exit 0
    fig = tmp_path / "figures.json"
    raw = json.loads(FIGURES.read_text())
    raw["projection"]["tournament"]["cpu_s_coef"] = "@@"
    fig.write_text(json.dumps(raw).replace('"@@"', text))
    _one_line(saber("plan", "--params", TINY, "--gpus", "1", "--judge-rate", "1", "--figures", fig),
              "projection.tournament.cpu_s_coef", code=2)


@pytest.mark.parametrize("flag", ["--gpus", "--cpus", "--problems"])
def test_a_flag_too_large_for_a_number_is_one_line(flag):
    # old: OverflowError traceback ("int too large to convert to float") for a 400-digit --gpus
    huge = "1" + "0" * 400
    args = {"--gpus": "1", "--judge-rate": "1", flag: huge}
    msg = _one_line(saber("plan", "--params", TINY, *[x for kv in args.items() for x in kv]), flag, code=2)
    assert "up to" in msg
