"""Fault cases of what a finished run records and what reads it outside the stage loop: a damaged
``manifest.json`` (cut short, a list, a folder) under ``saber status`` and
``saber_lib.evaluate_retriever``; ``evaluate_retriever``'s own arguments out of their range; the qrels
sidecar of ``saber export`` naming who judged.

Old behaviour is given per test. The commands run as real processes on copies of the tiny run;
``evaluate_retriever`` runs in process, as a user's script calls it.
"""
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

import saber_lib
from conftest import copy_run, needs_data, one_line_error as _one_line, saber_cli as saber

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"
pytestmark = [needs_data("sources"), pytest.mark.pipeline]


class Overlap:
    """A retriever: the count of query words in the document."""
    name = "overlap"

    def score(self, query, documents):
        words = set(query.split())
        return [float(sum(w in words for w in d.split())) for d in documents]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_tournament_run):
    return copy_run(tiny_tournament_run[0], tmp_path_factory.mktemp("run_record_faults") / "run")


def _damage(manifest: Path, how: str) -> None:
    if how == "truncated":
        text = manifest.read_text()
        manifest.write_text(text[: len(text) // 2])
    elif how == "list":
        manifest.write_text(json.dumps([json.loads(manifest.read_text())]))
    else:
        manifest.unlink()
        manifest.mkdir()


DAMAGE = {"truncated": "not valid JSON", "list": "type list, not an object", "folder": "a folder"}


# --------------------------------------------------------------------------- saber status
@pytest.mark.parametrize("how", list(DAMAGE))
@pytest.mark.parametrize("stage", ["tournament", "corpus"])
def test_status_on_a_damaged_manifest_is_one_line_naming_it(tiny, tmp_path, how, stage):
    # old: JSONDecodeError / AttributeError ('list' object has no attribute 'get') / IsADirectoryError
    # tracebacks (a damaged corpus manifest also as the input of every later stage)
    run = copy_run(tiny, tmp_path / "run")
    man = run / stage / "manifest.json"
    _damage(man, how)
    msg = _one_line(saber("status", "--run-dir", run, "--params", TINY), man, DAMAGE[how], code=1)
    assert "saber run" in msg          # what to do about it
    # without --params the profile is looked up in the manifests: the damaged one is named as well
    if stage == "corpus":
        _one_line(saber("status", "--run-dir", run), man, DAMAGE[how], code=1)


# --------------------------------------------------------------------------- evaluate_retriever
@pytest.mark.parametrize("how", list(DAMAGE))
def test_evaluate_retriever_on_a_damaged_manifest_names_it(tiny, tmp_path, how):
    # old: JSONDecodeError without a file name, AttributeError, IsADirectoryError
    run = copy_run(tiny, tmp_path / "run")
    man = run / "tournament" / "manifest.json"
    _damage(man, how)
    with pytest.raises(ValueError, match=DAMAGE[how]) as e:
        saber_lib.evaluate_retriever(Overlap(), run_dir=run)
    assert str(man) in str(e.value)


def test_evaluate_retriever_on_a_damaged_evaluate_manifest_names_it_and_the_key(tiny, tmp_path):
    # old: KeyError: 'parameters' (an evaluate manifest without them), and a run's ndcg_k of "ten" used
    run = copy_run(tiny, tmp_path / "run")
    (run / "evaluate").mkdir()
    man = run / "evaluate" / "manifest.json"
    man.write_text('{"stage": "evaluate", "param')
    with pytest.raises(ValueError, match="not valid JSON") as e:
        saber_lib.evaluate_retriever(Overlap(), run_dir=run)
    assert str(man) in str(e.value)
    man.write_text(json.dumps({"stage": "evaluate"}))
    with pytest.raises(ValueError, match="parameters") as e:
        saber_lib.evaluate_retriever(Overlap(), run_dir=run)
    assert str(man) in str(e.value)
    paper = saber_lib.core.config.paper_profile().values
    params = {**paper["evaluate"], "seed": 0, "ndcg_k": "ten"}
    man.write_text(json.dumps({"stage": "evaluate", "parameters": params}))
    with pytest.raises(ValueError, match="ndcg_k") as e:
        saber_lib.evaluate_retriever(Overlap(), run_dir=run)
    assert str(man) in str(e.value)


@pytest.mark.parametrize("kwargs, key", [({"settings": []}, "settings"), ({"settings": "statement-full"}, "settings"),
                                         ({"n_bootstrap": 0}, "n_bootstrap"), ({"ndcg_k": 2.5}, "ndcg_k"),
                                         ({"ndcg_k": 0}, "ndcg_k"), ({"ci_level": 1.5}, "ci_level"),
                                         ({"tie_policy": "random"}, "tie_policy"), ({"seed": -1}, "seed"),
                                         ({"benchmark": "mine"}, "benchmark")])
def test_evaluate_retriever_refuses_an_argument_out_of_range_naming_it(tiny, kwargs, key):
    # old: settings=[] -> "cannot concat empty list"; n_bootstrap=0 -> a numpy error or NaN interval;
    # ndcg_k=2.5 -> a table computed at a fractional cut-off; a string of settings read letter by letter
    with pytest.raises(ValueError, match=rf"evaluate_retriever: {key}\b"):
        saber_lib.evaluate_retriever(Overlap(), run_dir=tiny, **kwargs)


def test_evaluate_retriever_with_arguments_in_range_still_computes(tiny):
    # the checks refuse nothing valid: a tuple of settings, the smallest k and resample count
    t = saber_lib.evaluate_retriever(Overlap(), run_dir=tiny, settings=("statement-full",), ndcg_k=1, n_bootstrap=1)
    overall = t.filter(pl.col("group") == "Overall")
    assert overall["setting"].to_list() == ["statement-full"] and 0.0 <= overall["mean"][0] <= 1.0


# --------------------------------------------------------------------------- saber export
def test_export_sidecar_names_the_judge_and_its_prompt(tiny, tmp_path):
    # old: the judge and prompt-hash columns of qrels/test.sidecar.tsv were empty (the evaluate stage's
    # own export filled them; saber export never passed them)
    out = tmp_path / "beir"
    r = saber("export", "--run-dir", tiny, "--out", out)
    assert r.returncode == 0, r.stderr
    info = json.loads((tiny / "tournament" / "manifest.json").read_text())["info"]
    lines = (out / "qrels" / "test.sidecar.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, ln.split("\t"))) for ln in lines[1:]]
    ratings = pl.read_parquet(tiny / "tournament" / "ratings.parquet")
    assert len(rows) == ratings.height > 0
    # the tiny profile's tournament judge is the proxy of tournament.judge_embed_model (use-m)
    assert info["judge"] and "use-m" in info["judge"]
    assert {r["judge"] for r in rows} == {info["judge"]}
    assert {r["prompt-hash"] for r in rows} == {info.get("judge_prompt_hash") or ""}
