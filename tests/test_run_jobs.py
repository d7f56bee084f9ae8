"""``saber run`` as a user runs it, from a copy of the session's tiny run up to the tournament:
progress lines with counts on a pipe before the stage's ``[done]`` (the artifacts as they were), and
``--jobs 1`` and ``--jobs 2`` giving the same artifacts, manifests and states."""
import json
import re
import shutil

import pytest

from conftest import copy_run, needs_data, saber_cli, status_states

pytestmark = [needs_data("sources"), pytest.mark.pipeline]
TINY = "params/tiny.yaml"
AFTER = ["evaluate", "signal_ablation", "distributions"]   # independent stages after the tournament


def _manifest(run, stage):
    return json.loads((run / stage / "manifest.json").read_text())


def test_a_piped_run_shows_progress_lines_with_counts_and_leaves_the_artifacts_alone(tmp_path, tiny_tournament_run):
    src, _ = tiny_tournament_run
    run = copy_run(src, tmp_path / "run")
    shutil.rmtree(run / "tournament" / "rounds")    # its rounds are played again, its judge embeds the texts again
    r = saber_cli("run", "tournament", "--force", "--jobs", "1", "--params", TINY, "--run-dir", run,
                  "--set", f"run.figures_dir={tmp_path / 'fig'}", "--set", f"run.cache_dir={tmp_path / 'cache'}",
                  env={"SABER_PROGRESS_INTERVALS": "0,0.5"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    done = lines.index(next(ln for ln in lines if ln.startswith("[done] tournament")))
    counted = [ln for ln in lines[:done] if re.match(r"\[\.\.\.\.\] tournament  \d+s  .*\b\d+/\d+", ln)]
    assert counted, r.stdout
    assert "\r" not in r.stdout                        # a pipe gets plain lines, not a redrawn one
    old, new = _manifest(src, "tournament"), _manifest(run, "tournament")
    assert new["output_hash"] == old["output_hash"]
    assert {k: v["sha256"] for k, v in new["outputs"].items()} == {k: v["sha256"] for k, v in old["outputs"].items()}
    assert not [p for p in run.rglob("*") if "progress" in p.name]   # nothing of the progress in the run


def test_one_job_and_two_jobs_give_the_same_outputs_manifests_and_states(tmp_path, tiny_tournament_run):
    src, _ = tiny_tournament_run
    runs = {}
    for jobs in (1, 2):
        run = copy_run(src, tmp_path / f"run{jobs}" / "run")   # the same run name: the same figures captions
        sets = ["--set", f"run.figures_dir={tmp_path / f'fig{jobs}'}",
                "--set", f"run.cache_dir={tmp_path / f'cache{jobs}'}"]   # embeddings computed in each
        r = saber_cli("run", *AFTER, "--jobs", jobs, "--params", TINY, "--run-dir", run, *sets)
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(ln.split()[2] for ln in r.stdout.splitlines() if ln.startswith("[run ]")) == sorted(AFTER)
        st = saber_cli("status", "--params", TINY, "--run-dir", run, *sets)
        runs[jobs] = (run, status_states(st.stdout))
    (one, states1), (two, states2) = runs[1], runs[2]
    assert states1 == states2 and all(states1[s][0] == "done" for s in AFTER)
    for stage in AFTER:
        m1, m2 = _manifest(one, stage), _manifest(two, stage)
        for key in ("output_hash", "param_hash"):
            assert m1[key] == m2[key], (stage, key)
        assert {k: v["sha256"] for k, v in m1["outputs"].items()} == \
               {k: v["sha256"] for k, v in m2["outputs"].items()}, stage
        assert m1["input_hashes"] == m2["input_hashes"], stage
