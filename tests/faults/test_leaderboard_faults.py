"""Fault cases of ``saber leaderboard``: published files that declare another metric (cut-off or
gain), JSON that a plain reader accepts but reads one way among several, an output folder that
keeps the files of an earlier call (or belongs to someone else), and a run whose evaluate stage is
unfinished or was edited."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from saber_lib.core.data import resolve_data_dir
from saber_lib.leaderboard import cli
from saber_lib.leaderboard import published as pub
from saber_lib.pipeline import integrity
from saber_lib.core.data import output_hash_of, output_records

ROOT = Path(__file__).resolve().parent.parent.parent
PUBLISHED = resolve_data_dir() / "published"


@pytest.fixture
def published(tmp_path) -> Path:
    """A writable copy of the authors' five published result files (and their interval files)."""
    dst = tmp_path / "published"
    for f in PUBLISHED.rglob("*.json"):
        (dst / f.relative_to(PUBLISHED)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dst / f.relative_to(PUBLISHED))
    return dst


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_file_of_another_cutoff_or_gain_is_refused_naming_file_and_field(published, tmp_path, capsys):
    # old: a file declaring k = 5 (or a linear gain) was ranked in the nDCG@10 table
    bm25 = published / "evaluation" / "bm25__p0.json"
    _edit(bm25, lambda d: d["reports"]["bm25"].update(k=5))
    with pytest.raises(pub.LayoutError, match=r"bm25__p0.json: field 'reports.bm25.k': declares nDCG@5"):
        pub.read_published_dir(published)
    line = _error(capsys, ["--published", str(published), "--n-resamples", "10", "--out", str(tmp_path / "lb")])
    assert str(bm25) in line and "reports.bm25.k" in line
    assert not (tmp_path / "lb").exists()

    _edit(bm25, lambda d: d["reports"]["bm25"].update(k=10, dcg_variant="linear"))
    with pytest.raises(pub.LayoutError, match=r"bm25__p0.json: field 'reports.bm25.dcg_variant': .*'linear'"):
        pub.read_published_dir(published)
    _edit(bm25, lambda d: d["reports"]["bm25"].update(dcg_variant="exponent"))
    assert len(pub.read_published_dir(published).systems) == 5

    conf = published / "confidence" / "jaccard.json"
    _edit(conf, lambda d: d.update(k=20))
    with pytest.raises(pub.LayoutError, match=r"jaccard.json: field 'k': declares nDCG@20"):
        pub.read_published_dir(published)


def test_ambiguous_json_is_an_error_naming_the_file(published):
    # old: json.load kept the last of two keys, and read NaN / Infinity as numbers
    bm25 = published / "evaluation" / "bm25__p0.json"
    text = bm25.read_text()
    bm25.write_text(text.replace('"k": 10,', '"k": 5,\n      "k": 10,', 1))  # json.load would keep 10
    with pytest.raises(pub.LayoutError, match=r"bm25__p0.json: not valid JSON .*key 'k' appears twice"):
        pub.read_published_dir(published)
    bm25.write_text(text)

    conf = published / "confidence" / "bm25.json"
    ctext = conf.read_text()
    lo = json.loads(ctext)["tasks"][0]["confidence_interval"][0]
    for bad, why in (("NaN", "NaN is not JSON"), ("-Infinity", "-Infinity is not JSON"), ("1e999", "overflows")):
        conf.write_text(ctext.replace(repr(lo), bad, 1))
        with pytest.raises(pub.LayoutError, match=rf"confidence/bm25.json: not valid JSON .*{why}"):
            pub.read_published_dir(published)
    conf.write_text(ctext)
    assert len(pub.read_published_dir(published).confidence) == len(list((published / "confidence").glob("*.json")))


@pytest.mark.pipeline   # the whole leaderboard command, tables and figures
def test_leaderboard_out_holds_only_this_calls_files(tmp_path, capsys, published_ranking):
    # old: the tables of an earlier call on other tasks stayed beside the new ones
    out = tmp_path / "lb"
    base = ["--published", str(published_ranking), "--n-resamples", "10", "--out", str(out)]
    assert cli.main([*base, "--task", "all"]) == 0
    assert (out / "leaderboard_full-full.md").is_file()
    assert cli.main(base) == 0
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    listed = json.loads((out / "manifest.json").read_text())["files"]
    assert names == sorted(listed) and not (out / "leaderboard_full-full.md").exists()
    assert (out / "leaderboard_statement-full.md").is_file()

    mine = tmp_path / "mine"  # a folder this command did not write is refused, untouched
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    line = _error(capsys, [*base[:-1], str(mine)])
    assert str(mine) in line and "not empty" in line
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("entry", [["saber_lib.pipeline.cli", "leaderboard"], ["saber_lib.leaderboard.cli"]],
                         ids=["saber", "module"])
@pytest.mark.pipeline   # the whole leaderboard command, tables and figures
def test_saber_leaderboard_ranks_only_a_finished_and_intact_evaluate(tmp_path, entry, published_ranking):
    # old: `saber leaderboard --run-dir` ranked whatever evaluate/ndcg.parquet held, and
    # `python -m saber_lib.leaderboard.cli` still did: both verify the same way now
    run = tmp_path / "run"
    (run / "evaluate").mkdir(parents=True)
    rng = np.random.default_rng(0)
    pl.DataFrame({"retriever": "mine", "setting": "statement-full", "query_id": [str(i) for i in range(1000)],
                  "ndcg": rng.random(1000)}).write_parquet(run / "evaluate" / "ndcg.parquet")

    def saber_leaderboard(out):
        return subprocess.run([sys.executable, "-m", *entry, "--published",
                               str(published_ranking), "--run-dir", str(run), "--n-resamples", "10", "--out", str(out)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                              timeout=600)

    r = saber_leaderboard(tmp_path / "lb")  # no manifest: evaluate never finished here
    assert r.returncode == 2 and "stage 'evaluate' has not finished" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "lb").exists()

    recs = output_records(run / "evaluate")  # as the runner records a finished stage
    man = {"outputs": recs, "output_hash": output_hash_of(recs)}
    (run / "evaluate" / "manifest.json").write_text(json.dumps(man))
    assert saber_leaderboard(tmp_path / "lb").returncode == 0

    f = run / "evaluate" / "ndcg.parquet"  # a same-size edit with the mtime put back
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = saber_leaderboard(tmp_path / "lb2")
    assert r.returncode == 2 and str(f) in r.stderr and "saber accept evaluate" in r.stderr, r.stderr
    assert not (tmp_path / "lb2").exists()


@pytest.mark.pipeline   # the whole leaderboard command, tables and figures
def test_a_run_scored_at_another_cutoff_is_refused(tmp_path, capsys, published_ranking):
    # old: a run evaluated with evaluate.ndcg_k = 5 was ranked in the nDCG@10 table
    run = tmp_path / "run"
    (run / "evaluate").mkdir(parents=True)
    pl.DataFrame({"retriever": "mine", "setting": "statement-full", "query_id": [str(i) for i in range(1000)],
                  "ndcg": np.linspace(0, 1, 1000)}).write_parquet(run / "evaluate" / "ndcg.parquet")
    man = run / "evaluate" / "manifest.json"
    recs = output_records(run / "evaluate")   # a finished evaluate stage (verified first)
    man.write_text(json.dumps({"parameters": {"ndcg_k": 5}, "outputs": recs}))
    base = ["--published", str(published_ranking), "--run-dir", str(run), "--n-resamples", "10"]
    line = _error(capsys, [*base, "--out", str(tmp_path / "lb")])
    assert str(man) in line and "parameters.ndcg_k" in line and "nDCG@5" in line
    man.write_text(json.dumps({"parameters": {"ndcg_k": 10}, "outputs": recs}))
    assert cli.main([*base, "--out", str(tmp_path / "lb")]) == 0
