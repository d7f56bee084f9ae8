"""Fault cases in the runner and the stages: two runs on one run directory, a
finished artifact changed on disk, external inputs, LLM stages whose calls fail, an
upstream change under a resumable stage, and the smaller ones (secrets in parameters, a stale
``beir/`` folder, a kernel that outlives a killed runner).

Everything goes through the real command line (``python -m saber_lib.pipeline.cli``) in real
processes, on the tiny profile. The stages up to the tournament run once per module
(``finished``); each test works on its own copy (``run``).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest

from saber_lib.pipeline import integrity, runner
from saber_lib.core.data import hash_file

ROOT = Path(__file__).resolve().parent.parent.parent
pytestmark = pytest.mark.pipeline        # runs notebooks / the command line in real processes (not in make test-fast)
TINY = str(ROOT / "params" / "tiny.yaml")
PASSWORD = "pw-very-secret-77"
# evaluate with the lexical retrievers only: seconds, no encoder to load
FAST_EVAL = ["--set", "evaluate.retrievers=[bm25]", "--set", "evaluate.n_bootstrap=10"]


def saber(*args, cwd=None, timeout=900, env=None):
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *map(str, args)], cwd=cwd or ROOT,
                          env=e, capture_output=True, text=True, timeout=timeout)


def run_args(run_dir, *stages, extra=()):
    return ("run", *stages, "--params", TINY, "--run-dir", run_dir,
            "--set", f"run.figures_dir={Path(run_dir).parent / 'fig'}", *extra)


def states(run_dir) -> dict:
    r = saber("status", "--run-dir", run_dir, "--params", TINY)
    assert r.returncode == 0, r.stderr
    return {ln.split()[0]: ln.split()[1] for ln in r.stdout.splitlines() if ln.strip()}


def error_line(r) -> str:
    assert r.returncode != 0, r.stdout
    return r.stderr.strip().splitlines()[0]


@pytest.fixture(scope="module")
def finished(tiny_tournament_run):
    """The session's tiny run up to the tournament (``saber run tournament``; conftest)."""
    return tiny_tournament_run[0]


@pytest.fixture
def run(finished, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(finished, d, ignore=shutil.ignore_patterns(integrity.LOCK_FILE))  # copy2: sizes and mtimes kept
    return d


# --------------------------------------------------------------------------- 1: the lock
HOLDER = """
import sys, time
from saber_lib.pipeline.integrity import RunLock
RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def test_second_run_on_a_locked_run_dir_fails_at_once_naming_the_holder(tmp_path):
    # old: no lock; two runs mixed their settings in one run directory
    d = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(d)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        r = saber(*run_args(d, "corpus"))
        assert time.monotonic() - t0 < 30  # at once: no stage started
        line = error_line(r)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
        assert f"pid {holder.pid}" in line and "in use by another saber run" in line and str(d) in line
        assert not (d / "corpus").exists()
        assert states(d)["corpus"] == "missing"  # status needs no lock
    finally:
        holder.kill()
        holder.wait()
    # the OS dropped the dead holder's lock: the next run takes it
    with integrity.RunLock(d):
        pass


def test_two_real_runs_with_different_settings_one_fails(tmp_path):
    d = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "saber_lib.pipeline.cli",
                              *run_args(d, "corpus", extra=["--set", "corpus.max_records_per_source=30"])],
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = d / integrity.LOCK_FILE
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (lock.exists() and f'"pid": {first.pid}' in lock.read_text()):
        time.sleep(0.1)
    second = saber(*run_args(d, "corpus", extra=["--set", "corpus.max_records_per_source=20"]))
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert f"pid {first.pid}" in error_line(second) and "corpus.max_records_per_source=30" in error_line(second)
    man = json.loads((d / "corpus" / "manifest.json").read_text())
    assert man["parameters"]["max_records_per_source"] == 30  # one setting only


def _kernel_children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and "ipykernel" in cmd:
            out.append(int(p.name))
    return out


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads the process table from /proc")
def test_sigkill_of_the_runner_takes_the_kernel_and_the_lock_with_it(tmp_path):
    # old: after SIGKILL of `saber run` the notebook kernel lived on
    d = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "saber_lib.pipeline.cli", *run_args(d, "corpus")],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kernels = []
    deadline = time.monotonic() + 120
    while not kernels and time.monotonic() < deadline and p.poll() is None:
        kernels = _kernel_children(p.pid)
        time.sleep(0.2)
    assert kernels, "no kernel started"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(Path(f"/proc/{k}").exists() for k in kernels):
        time.sleep(0.2)
    alive = [k for k in kernels if Path(f"/proc/{k}").exists()
             and "Z" not in Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    assert not alive, f"kernel {alive} outlived the killed runner"
    with integrity.RunLock(d):  # released by the kernel (the OS), not by our code
        pass
    assert states(d)["corpus"] == "missing"


# --------------------------------------------------------------------------- 2: changed artifacts
def test_changed_ratings_are_never_used_silently(run):
    # old: status 'done', `run all` skipped everything, `run evaluate --force` used the altered ratings
    ratings = run / "tournament" / "ratings.parquet"
    os.utime(ratings)  # new mtime, same bytes: hashed, unchanged
    assert states(run)["tournament"] == "done"
    df = pl.read_parquet(ratings)
    df.with_columns(pl.lit(0.0).alias("rating")).write_parquet(ratings)  # rewritten
    st = states(run)
    assert st["tournament"] == "modified" and st["select"] == "done"
    for extra in ([], ["--force"]):
        r = saber(*run_args(run, "evaluate", extra=[*FAST_EVAL, *extra]))
        line = error_line(r)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
        assert str(ratings) in line and "saber run tournament --force" in line and "saber accept tournament" in line
        assert not (run / "evaluate").exists()
    ratings.write_bytes(ratings.read_bytes()[:100])  # truncated
    assert states(run)["tournament"] == "modified"
    # way out 1: regenerate
    r = saber(*run_args(run, "tournament", extra=["--force"]))
    assert r.returncode == 0, r.stderr
    assert states(run)["tournament"] == "done"
    assert pl.read_parquet(ratings)["rating"].max() > 0


def test_accepting_an_edit_records_it_and_makes_readers_stale(run):
    bench = run / "select" / "benchmark.parquet"
    pl.read_parquet(bench).with_columns(pl.col("sim_topic") * 0).write_parquet(bench)
    assert states(run)["select"] == "modified" and states(run)["tournament"] == "stale"
    r = saber("accept", "select", "--run-dir", run)
    assert r.returncode == 0, r.stderr
    man = json.loads((run / "select" / "manifest.json").read_text())
    assert man["accepted"][-1]["files"] == [str(bench)] and man["accepted"][-1]["by"]
    assert man["outputs"]["benchmark.parquet"]["sha256"] == hash_file(bench)
    st = states(run)
    assert st["select"] == "done" and st["tournament"] == "stale"


def test_new_file_in_a_stage_folder_is_a_change(run):
    (run / "tournament" / "extra.parquet").write_bytes(b"x")
    assert states(run)["tournament"] == "modified"


# --------------------------------------------------------------------------- 3: external inputs
def _write_run(path: Path, bench: pl.DataFrame, prefix: str = "", score=lambda i: 1.0 / (i + 1)):
    lines = [f"{q} Q0 {prefix}{c} {i + 1} {score(i):.4f} sys" for i, (q, c) in
             enumerate(bench.select("query_id", "cand_id").iter_rows())]
    path.write_text("\n".join(lines) + "\n")


def test_run_files_are_inputs_resolved_against_the_cwd_and_checked(run, tmp_path):
    # old: an edited run file left evaluate up to date; no-match runs scored with no warning;
    # a relative path resolved against the project root; export_beir=false kept an old beir/
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    work = tmp_path / "cwd"
    work.mkdir()
    _write_run(work / "sys.trec", bench)
    ev = ["--set", "evaluate.retrievers=[bm25, 'run:sys.trec']", "--set", "evaluate.n_bootstrap=10"]
    r = saber(*run_args(run, "evaluate", extra=ev), cwd=work)
    assert r.returncode == 0, r.stderr
    man = json.loads((run / "evaluate" / "manifest.json").read_text())
    assert f"file:{work / 'sys.trec'}" in man["input_hashes"]
    assert f"run:{work / 'sys.trec'}" in man["parameters"]["retrievers"]
    assert (run / "evaluate" / "beir").is_dir()

    _write_run(work / "sys.trec", bench, score=lambda i: float(i))  # edited after evaluation
    # (the status of a --set run is checked in-process: `saber status` takes no --set)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        prof = runner.load_run_profile(TINY, {"evaluate.retrievers": ["bm25", "run:sys.trec"], "evaluate.n_bootstrap": 10})
    finally:
        os.chdir(cwd)
    assert runner.status(runner.RunContext(prof, run.resolve()))["evaluate"] == "stale"

    r = saber(*run_args(run, "evaluate", extra=[*ev, "--set", "evaluate.export_beir=false"]), cwd=work)
    assert r.returncode == 0, r.stderr
    assert not (run / "evaluate" / "beir").exists()
    man = json.loads((run / "evaluate" / "manifest.json").read_text())
    assert not any(k.startswith("beir") for k in man["outputs"])

    _write_run(work / "other.trec", bench, prefix="x")  # ids of another corpus
    r = saber(*run_args(run, "evaluate", extra=["--set", "evaluate.retrievers=[bm25, 'run:other.trec']"]), cwd=work)
    assert r.returncode == 1 and str(work / "other.trec") in r.stderr and "run_min_match" in r.stderr
    assert not (run / "evaluate" / "manifest.json").exists()


def test_run_file_matching_too_few_candidates_is_an_error(tmp_path):
    from saber_lib.retrieval.runs import RunFileRetriever
    from saber_lib.retrieval.runs import TrecRunError

    p = tmp_path / "r.trec"
    p.write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d9 1 1.0 t\n")
    r = RunFileRetriever(p)
    assert len(r.score_many(["", ""], [["a", "b"]] * 2, ["q1", "q2"], [["d1", "d3"], ["d9", "d8"]])) == 2
    with pytest.raises(TrecRunError, match=r"r.trec: the run lists 0 of the 2 candidates of query 'q2'"):
        r.score_many([""], [["a", "b"]], ["q2"], [["d1", "d2"]])
    with pytest.raises(TrecRunError, match="lists 1 of the 2"):
        RunFileRetriever(p, min_match=0.75).score_many([""], [["a", "b"]], ["q1"], [["d1", "d3"]])


def test_non_utf8_run_and_annotation_files_give_one_clear_error(tmp_path):
    # old: a bare UnicodeDecodeError naming neither file nor line
    from saber_lib.validation.annotate_ui import AnnotationStore
    from saber_lib.retrieval.runs import TrecRunError, read_trec_run

    p = tmp_path / "latin1.trec"
    p.write_bytes("q1 Q0 d1 1 1.0 t\nq2 Q0 caf\xe9 1 1.0 t\n".encode("latin-1"))
    with pytest.raises(TrecRunError, match=r"latin1.trec: not UTF-8 text: byte 0xe9 .*line 2"):
        read_trec_run(p)
    store = AnnotationStore(tmp_path / "annotations", "ann")
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_bytes(b'{"pair_id": "p", "label": "a", "note": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"ann.*not UTF-8 text.*line 1"):
        store._read()


# --------------------------------------------------------------------------- 4: failure budget
class Http500:
    def __init__(self):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(500)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _llm_args(url):
    return ["--set", "llm.backend=openai", "--set", f"llm.base_urls=[{url}]", "--set", "llm.model=m",
            "--set", "summaries.summarizer=llm", "--set", "summaries.summary_max_problems=5",
            "--set", "llm.max_retries=0", "--set", "llm.retry_backoff_s=0", "--set", "llm.timeout_s=5"]


def test_summaries_against_a_closed_port_fail_and_signals_does_not_run(run):
    # old: `[done]` for summaries and signals, exit 0, 5 of 5 failed in the manifest
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1"
    r = saber(*run_args(run, "summaries", "signals", extra=_llm_args(url)))
    assert r.returncode == 1
    assert "stage 'summaries' failed" in r.stderr and "of 5 LLM requests failed" in r.stderr
    assert "connection error" in r.stderr and PASSWORD not in r.stderr
    assert "[run ] signals" not in r.stdout
    assert not (run / "summaries" / "manifest.json").exists()
    assert (run / "summaries" / "summaries.parquet").exists()  # partial artifacts kept
    st = states(run)
    assert st["summaries"] == "missing" and st["signals"] == "stale"
    # secrets: the executed notebook and what the notebook recorded hold the masked URL only
    nb = (run / "notebooks" / "03_summaries.ipynb").read_text()
    assert PASSWORD not in nb and f"http://***@127.0.0.1:{port}/v1" in nb
    assert PASSWORD not in (run / "summaries" / "info.json").read_text()
    topics = (run / "topics" / "manifest.json").read_text()  # reran (it takes the llm section): done
    assert PASSWORD not in topics and f"http://***@127.0.0.1:{port}/v1" in topics


def test_summaries_against_a_server_answering_500_fail(run):
    srv = Http500()
    try:
        r = saber(*run_args(run, "summaries", extra=_llm_args(f"http://127.0.0.1:{srv.port}/v1")))
    finally:
        srv.close()
    assert r.returncode == 1 and "HTTP 500" in r.stderr and "LLM requests failed" in r.stderr
    assert states(run)["summaries"] == "missing"


def test_budget_check_reads_every_recorded_usage():
    info = {"llm": {"llm_usage": {"calls": 90, "cached": 5, "failed": 5}, "llm_first_errors": ["boom"]}}
    integrity.check_llm_budget(info, 0.1, "x")  # 5 of 100
    from saber_lib.llm import FailureBudgetExceeded

    with pytest.raises(FailureBudgetExceeded, match="stage x: 5 of 100 .*boom"):
        integrity.check_llm_budget(info, 0.02, "x")
    integrity.check_llm_budget({"backend": "proxy"}, 0.0, "x")  # no LLM: nothing to check


# --------------------------------------------------------------------------- 6: upstream change
def test_changed_selection_restarts_the_tournament_and_a_kill_resumes(run):
    # old: "stored judgments belong to another setting ... remove the folder", even with --force
    old_rounds = sorted(p.name for p in (run / "tournament" / "rounds").iterdir())
    r = saber(*run_args(run, "tournament", extra=["--set", "select.n_queries=4"]))
    assert r.returncode == 0, r.stderr
    assert "[run ] select" in r.stdout and "[run ] tournament" in r.stdout
    [aside] = list((run / "_superseded").iterdir())
    assert aside.name.startswith("tournament-") and sorted(p.name for p in (aside / "rounds").iterdir()) == old_rounds
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    ratings = pl.read_parquet(run / "tournament" / "ratings.parquet")
    assert set(ratings["query_id"]) == set(bench["query_id"]) and bench["query_id"].n_unique() == 4

    # a kill with unchanged inputs: the manifest is gone (as during a run) and the last round was
    # not written; the rerun resumes from the stored rounds, nothing is moved aside
    (run / "tournament" / "manifest.json").unlink()
    rounds = sorted((run / "tournament" / "rounds").glob("round_*.parquet"))
    rounds[-1].unlink()
    kept = {p.name: p.stat().st_mtime_ns for p in rounds[:-1]}
    r = saber(*run_args(run, "tournament", extra=["--set", "select.n_queries=4"]))
    assert r.returncode == 0, r.stderr
    assert len(list((run / "_superseded").iterdir())) == 1
    assert {p: (run / "tournament" / "rounds" / p).stat().st_mtime_ns for p in kept} == kept
    assert pl.read_parquet(run / "tournament" / "ratings.parquet").equals(ratings)


# --------------------------------------------------------------------------- secrets (7)
def test_parameters_shown_have_their_secrets_masked_and_the_backend_gets_the_real_urls(monkeypatch):
    # old: http://user:password@host was written into the manifest and the executed notebook
    from saber_lib.llm import BASE_URLS_ENV, _real_base_urls

    urls = [f"http://alice:{PASSWORD}@127.0.0.1:1/v1", "http://127.0.0.1:2/v1?api_key=tok-123456"]
    shown, env = runner._secret_free({"llm": {"base_urls": urls}, "seed": 0})
    assert shown["llm"]["base_urls"] == ["http://***@127.0.0.1:1/v1", "http://127.0.0.1:2/v1?api_key=***"]
    assert PASSWORD not in json.dumps(shown) and "tok-123456" not in json.dumps(shown)
    monkeypatch.setenv(BASE_URLS_ENV, env[BASE_URLS_ENV])
    assert _real_base_urls(shown["llm"]["base_urls"]) == urls
    assert runner._secret_free({"llm": {"base_urls": ["http://h:1/v1"]}}) == ({"llm": {"base_urls": ["http://h:1/v1"]}}, {})
