"""Progress while a stage runs: the counters a loop writes (``core.progress``), what the runner shows
of them (``pipeline.progress_view``: throttled plain lines, a heartbeat), and the stage scheduler's
order and failure handling (``pipeline.schedule``), without running a notebook."""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from saber_lib.core import progress
from saber_lib.pipeline import progress_view, schedule
from saber_lib.pipeline.progress_view import ProgressView, counts_text, duration

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def write(path, count, total=20, unit="round", started=1000.0):
    path.write_text(json.dumps([{"unit": unit, "count": count, "total": total, "started": started}]))


def test_plain_lines_at_most_every_min_and_a_heartbeat_by_max(tmp_path):
    clock, lines = Clock(), []
    view = ProgressView(lines.append, live=False, intervals=(10, 30), clock=clock, wallclock=clock)
    f = tmp_path / "tournament.json"
    view.begin("tournament", f)
    write(f, 1)
    for t in range(0, 10):                 # the stage's first 10 s: nothing, however the count moves
        clock.t = 1000 + t
        write(f, 1 + t)
        view.tick()
    assert lines == []
    clock.t = 1010                         # 10 s, count moved: one line
    write(f, 5)
    view.tick()
    assert lines == ["[....] tournament  10s  round 5/20  ~30s left"]   # 10 s for 5 rounds: 15 left at 2 s each
    for t in range(11, 20):                # the count moves every second, but the last line is < 10 s old
        clock.t = 1000 + t
        write(f, 5 + t - 10)
        view.tick()
    assert len(lines) == 1
    clock.t = 1020
    write(f, 8)
    view.tick()
    assert len(lines) == 2 and "round 8/20" in lines[1]
    for t in range(21, 50):                # the count stands still: no line until 30 s after the last
        clock.t = 1000 + t
        view.tick()
    assert len(lines) == 2
    clock.t = 1050
    view.tick()
    assert len(lines) == 3 and lines[2].startswith("[....] tournament  50s  round 8/20")   # the heartbeat
    f.write_text("[]")                     # its loops ended: no line for that, the next heartbeat says so
    clock.t = 1070
    view.tick()
    assert len(lines) == 3
    clock.t = 1080
    view.tick()
    assert lines[3:] == ["[....] tournament  1m20s"]
    view.end("tournament")
    clock.t = 1200
    view.tick()
    assert len(lines) == 4                 # a finished stage shows nothing


def test_a_stage_without_counters_gets_heartbeats_with_its_elapsed_time(tmp_path):
    clock, lines = Clock(), []
    view = ProgressView(lines.append, live=False, intervals=(10, 30), clock=clock, wallclock=clock)
    view.begin("thresholds", tmp_path / "absent.json")
    for t in range(0, 95):
        clock.t = 1000 + t
        view.tick()
    assert lines == ["[....] thresholds  30s", "[....] thresholds  1m00s", "[....] thresholds  1m30s"]


def test_live_mode_redraws_one_line_and_clears_it_for_log_lines(tmp_path):
    class Stream:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    clock, logged, stream = Clock(), [], Stream()
    view = ProgressView(logged.append, live=True, stream=stream, intervals=(10, 30), clock=clock, wallclock=clock)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    view.begin("evaluate", a)
    view.begin("inversions", b)
    write(a, 5, 12, "retriever")
    clock.t = 1002
    view.tick()
    assert stream.text.endswith("evaluate  2s  retriever 5/12  ~3s left | inversions  2s")
    view.log("[done] inversions in 2.0s")
    assert stream.text.endswith("\r\x1b[K") and logged == ["[done] inversions in 2.0s"]


def test_counts_text_and_durations():
    states = [{"unit": "depth", "count": 2, "total": 9, "started": 100.0},
              {"unit": "visits", "count": 8192, "total": 17618, "started": 110.0}]
    # the time left comes from the outermost counter with a total: 20 s for 2 of 9 depths -> 70 s more
    assert counts_text(states, 120.0) == "depth 2/9, visits 8,192/17,618  ~1m10s left"
    assert counts_text([{"unit": "texts", "count": 3, "total": None}], 0) == "texts 3"
    assert [duration(s) for s in (0, 59.4, 61, 3599, 3720)] == ["0s", "59s", "1m01s", "59m59s", "1h02m"]


def test_intervals_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(progress_view.INTERVALS_ENV, "0.5,2")
    assert progress_view.intervals_from_env() == (0.5, 2.0)
    monkeypatch.setenv(progress_view.INTERVALS_ENV, "3")
    with pytest.raises(SystemExit, match="MIN,MAX"):
        progress_view.intervals_from_env()


def test_counters_nest_and_are_written_only_where_the_runner_asks(tmp_path, monkeypatch):
    f = tmp_path / "p.json"
    monkeypatch.delenv(progress.ENV, raising=False)
    with progress.Progress("round", 3):
        pass
    assert not f.exists()                  # no progress file named: nothing written anywhere
    monkeypatch.setenv(progress.ENV, str(f))
    with progress.Progress("round", 3) as rounds:
        rounds.set(1)
        for _ in progress.track(["a", "b"], "texts"):
            pass
        units = [(s["unit"], s["count"], s["total"]) for s in progress.read_state(f)]
        assert units == [("round", 1, 3), ("texts", 2, 2)] or units == [("round", 1, 3)]
    assert progress.read_state(f) == []    # every counter closed
    assert list(tmp_path.iterdir()) == [f]  # written through a temporary file, renamed
    f.write_text("{half")
    assert progress.read_state(f) == [] and progress.read_state(tmp_path / "none.json") == []


def test_a_child_process_counters_reach_the_runners_output(tmp_path):
    """A kernel is another process: what its loop counts shows in the runner's lines."""
    f, lines = tmp_path / "topics.json", []
    code = ("import sys; from saber_lib.core.progress import Progress\n"
            "p = Progress('problems', 17618)\np.set(8192)\nsys.stdin.read()\np.close()\n")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, text=True,
                             env={**__import__("os").environ, progress.ENV: str(f), "PYTHONPATH": str(ROOT)})
    view = ProgressView(lines.append, live=False, intervals=(0, 0))
    view.begin("topics", f)
    try:
        with view.polling(0.05):
            deadline = time.monotonic() + 60
            while not any("problems 8,192/17,618" in ln for ln in lines) and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        child.communicate("", timeout=60)
    assert any(ln.startswith("[....] topics ") and "problems 8,192/17,618" in ln for ln in lines), lines


def test_progress_folder_is_removed_also_on_an_error():
    with pytest.raises(KeyboardInterrupt):
        with progress_view.progress_folder() as folder:
            (folder / "x.json").write_text("[]")
            raise KeyboardInterrupt
    assert not folder.exists()


def test_progress_folder_is_removed_on_sigterm(tmp_path):
    code = ("import os, signal, sys\nfrom saber_lib.pipeline.progress_view import progress_folder\n"
            "with progress_folder() as f:\n    print(f, flush=True)\n    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    import time; time.sleep(30)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 143, r.stderr
    assert not Path(r.stdout.strip()).exists()


# --- the scheduler ------------------------------------------------------------------------------------

DAG = {"corpus": (), "ontology": (), "topics": ("corpus", "ontology"), "summaries": ("corpus",),
       "signals": ("topics", "summaries")}
ORDER = list(DAG)


def _record(fail=(), skip=(), delay=0.05, shares=None):
    events, lock = [], threading.Lock()
    shares = {} if shares is None else shares   # stage -> stages running when it started
    started, ended = set(), set()

    def prepare(name):
        with lock:
            events.append(("prepare", name))
        return name not in skip

    def execute(name):
        with lock:
            events.append(("start", name))
            shares[name] = len(started) - len(ended)   # stages running beside it when it started
            started.add(name)
        time.sleep(delay)
        with lock:
            events.append(("end", name))
            ended.add(name)
        if name in fail:
            raise RuntimeError(f"{name} broke")

    return events, prepare, execute


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_each_stage_starts_after_what_it_reads_and_at_most_jobs_at_once(jobs):
    shares = {}
    events, prepare, execute = _record(skip={"ontology"}, shares=shares)
    res = schedule.run_dag(ORDER, DAG, jobs, prepare, execute)
    assert res == {"corpus": "ran", "ontology": "skipped", "topics": "ran", "summaries": "ran", "signals": "ran"}
    running, most = set(), 0
    for kind, name in events:
        if kind == "start":
            assert shares[name] == len(running)     # the stages running beside it when it started
            assert all(("end", d) in events[:events.index((kind, name))] for d in DAG[name] if d != "ontology")
            running.add(name)
            most = max(most, len(running))
        elif kind == "end":
            running.discard(name)
    assert most == min(jobs, 2)            # at most two stages are ever ready together here
    if jobs == 1:                          # one after another, in the given order
        assert [n for k, n in events if k == "prepare"] == ORDER


def test_with_one_job_the_first_failure_stops_the_run():
    events, prepare, execute = _record(fail={"corpus"})
    with pytest.raises(RuntimeError, match="corpus broke"):
        schedule.run_dag(ORDER, DAG, 1, prepare, execute)
    assert [n for k, n in events if k == "start"] == ["corpus"]


def test_with_several_jobs_a_failure_stops_only_what_reads_from_it():
    events, prepare, execute = _record(fail={"summaries"})
    with pytest.raises(schedule.StagesFailed) as e:
        schedule.run_dag(ORDER, DAG, 2, prepare, execute)
    started = {n for k, n in events if k == "start"}
    assert started == {"corpus", "ontology", "topics", "summaries"} and "signals" not in started
    assert list(e.value.failures) == ["summaries"] and e.value.left_out == ["signals"]
    assert str(e.value).splitlines() == ["summaries broke",
                                         "not run because a stage they read from failed: signals"]


@pytest.mark.parametrize("fail", [(), ("topics",)])
def test_a_stage_waits_for_the_stages_it_runs_after_without_reading_from_them(fail):
    """``after``: summaries (ready with corpus) starts only once topics has ended, done or failed; a
    failure of topics stops signals (which reads from it) and not summaries."""
    shares = {}
    events, prepare, execute = _record(fail=set(fail), shares=shares)
    run = lambda: schedule.run_dag(ORDER, DAG, 4, prepare, execute, after={"summaries": ("topics",)})
    if fail:
        with pytest.raises(schedule.StagesFailed):
            run()
    else:
        run()
    starts = [n for k, n in events if k == "start"]
    assert ("end", "topics") in events[:events.index(("start", "summaries"))]
    assert "summaries" in starts and ("signals" in starts) == (not fail)
    assert shares["topics"] == 0     # corpus and ontology have ended: topics started alone


def test_the_kernels_wait_passively_only_with_several_jobs_and_keep_their_thread_count(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert schedule.kernel_threads(1) == {}
    assert schedule.kernel_threads(3) == {"OMP_WAIT_POLICY": "PASSIVE"}   # no thread count: the same as one job
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")          # the user's own setting wins
    assert schedule.kernel_threads(2) == {}


def test_the_stage_table_orders_stages_after_the_ones_they_share_texts_with():
    """Every ``after`` of the stage table names a known stage earlier in the table (the sequential order),
    and none is one of its inputs (those are ordered anyway)."""
    from saber_lib.pipeline import stages

    names = [s.name for s in stages.STAGES]
    withs = [s for s in stages.STAGES if s.after]
    assert {s.name for s in withs} >= {"inversions", "math_vs_words"}
    for s in withs:
        for a in s.after:
            assert names.index(a) < names.index(s.name) and a not in s.deps


def test_threads_of_one_process_writing_one_file_at_once_never_share_a_temporary_file(tmp_path):
    """Stages that ``saber run --jobs`` starts are threads of one runner: two of them writing the same
    record (the figures folder's owner, on a fresh folder) at once must both succeed, leaving one whole
    file and no temporary file (a temporary name per process only made the second rename fail)."""
    from saber_lib.core.data import is_temp_file, write_json

    path, errors = tmp_path / "fig" / ".owner.json", []
    barrier = threading.Barrier(4)

    def write(k):
        try:
            barrier.wait()
            for i in range(200):
                write_json(path, {"writer": k, "i": i})
        except Exception as e:      # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and json.loads(path.read_text())["i"] == 199
    assert [p.name for p in path.parent.iterdir() if is_temp_file(p)] == []
