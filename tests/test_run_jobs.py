"""``saber run`` as a user runs it, from a copy of the session's tiny run up to the tournament:
progress lines with counts on a pipe before the stage's ``[done]`` (the artifacts as they were), and
``--jobs 1`` giving the same artifacts, manifests and states as the session's whole run with ``--jobs 2``."""
import json
import re
import shutil

import pytest

from conftest import AFTER_TOURNAMENT, copy_run, needs_data, saber_cli, status_states

pytestmark = [needs_data("sources"), pytest.mark.pipeline]
TINY = "params/tiny.yaml"
AFTER = list(AFTER_TOURNAMENT)   # independent stages after the tournament


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


def test_one_job_and_two_jobs_give_the_same_outputs_manifests_and_states(tiny_one_job_run, tiny_full_run):
    # one job: the session's run of these stages alone with --jobs 1 (conftest, on a copy of the same
    # tournament run, embeddings computed in its own cache); two jobs: the session's whole run (conftest:
    # `saber run all --jobs 2`, these stages among the others it ran two at a time)
    one, figures1, out = tiny_one_job_run
    two, figures2, _ = tiny_full_run
    assert sorted(ln.split()[2] for ln in out.splitlines() if ln.startswith("[run ]")) == sorted(AFTER)
    states1 = status_states(saber_cli("status", "--params", TINY, "--run-dir", one,
                                      "--set", f"run.figures_dir={figures1.parent}").stdout)
    states2 = status_states(saber_cli("status", "--params", TINY, "--run-dir", two,
                                      "--set", f"run.figures_dir={figures2.parent}").stdout)
    ran = {s: v for s, v in states1.items() if v[0] != "missing"}    # the stages the one-job run has
    assert set(AFTER) <= set(ran) and all(v == ("done", []) for v in ran.values()), states1
    assert ran == {s: states2[s] for s in ran}
    for stage in AFTER:
        m1, m2 = _manifest(one, stage), _manifest(two, stage)
        for key in ("output_hash", "param_hash"):
            assert m1[key] == m2[key], (stage, key)
        assert {k: v["sha256"] for k, v in m1["outputs"].items()} == \
               {k: v["sha256"] for k, v in m2["outputs"].items()}, stage
        assert m1["input_hashes"] == m2["input_hashes"], stage
