"""The Dask executor (``run.executor: dask``) on a LocalCluster of 2 worker processes: the same
signals store, byte for byte, as the local executor, on the tiny profile's data and after a worker
is killed mid-run (only the killed worker's tasks run again)."""
import functools
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.pipeline        # local Dask clusters in real processes (not in make test-fast)
import cloudpickle  # noqa: E402  (comes with distributed)
from conftest import needs_data  # noqa: E402

from saber_lib.ontology.tree import ontology_from_nodes  # noqa: E402
from saber_lib.core.parallel import DaskExecutor, LocalProcessExecutor, make_executor  # noqa: E402
from saber_lib.pipeline import runner  # noqa: E402
from saber_lib.signals import pairs, stage  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FILES = ("hist_offsets", "hist_cells", "hist_counts", "pair_offsets", "pair_ids", "pair_topic", "pair_summ")
cloudpickle.register_pickle_by_value(sys.modules[__name__])   # workers cannot import tests/


@pytest.fixture(scope="module")
def dask_pool():
    with DaskExecutor(None, 2) as ex:
        assert ex.workers == 2
        yield ex


def same_store(a: Path, b: Path):
    for name in FILES + ("doc_ids",):
        ext = ".parquet" if name == "doc_ids" else ".npy"
        assert (a / f"{name}{ext}").read_bytes() == (b / f"{name}{ext}").read_bytes(), name
    assert (a / "meta.json").read_text() == (b / "meta.json").read_text()


def test_map_keeps_task_order_and_scatters_shared(dask_pool):
    out = list(dask_pool.map(_affine, list(range(50)), {"a": 3, "b": np.arange(4)}))
    assert out == [3 * t + 6 for t in range(50)]
    assert isinstance(make_executor("local", 2), LocalProcessExecutor)
    with pytest.raises(ValueError, match="run.executor"):
        make_executor("ray")


def _affine(shared, t):
    return shared["a"] * t + int(shared["b"].sum())


@needs_data("sources")
def test_tiny_profile_signals_store_identical_to_local(tmp_path, dask_pool, tiny_tournament_run):
    run_dir = tiny_tournament_run[0]        # the session's tiny run (conftest): its signals ran locally
    assert (run_dir / "signals" / "meta.json").exists()
    corpus = pl.read_parquet(run_dir / "corpus" / "corpus.parquet")
    args = (corpus, pl.read_parquet(run_dir / "topics" / "topics.parquet"),
            pl.read_parquet(run_dir / "summaries" / "summaries.parquet"),
            ontology_from_nodes(run_dir / "ontology" / "nodes.parquet"))
    kw = dict(hist_bins=100, pair_floor_topic=0.5, pair_floor_summ=0.1, jaccard_empty=0.0, memory_budget_mb=64,
              workers=2, dedup_log=pl.read_parquet(run_dir / "corpus" / "dedup_log.parquet"))
    st = stage.compute_signals_stage(*args, tmp_path / "dask", executor=dask_pool, **kw)
    assert st["n_docs"] == corpus.height > 100
    stage.compute_signals_stage(*args, tmp_path / "local", executor=LocalProcessExecutor(2), **kw)
    same_store(tmp_path / "local", tmp_path / "dask")
    same_store(run_dir / "signals", tmp_path / "dask")   # the stage notebook's own (local) run
    # the stage notebook itself with run.executor: dask (a LocalCluster of 2 for the stage)
    shutil.copytree(run_dir, tmp_path / "run2", ignore=shutil.ignore_patterns("signals", ".saber.lock"))
    res = runner.run(ROOT / "params" / "tiny.yaml", ["signals"], run_dir=tmp_path / "run2",
                     overrides={"run.figures_dir": str(tmp_path / "figures2"), "run.executor": "dask",
                                "run.dask_workers": 2})
    assert res["signals"] == "ran" and res["summaries"] == "skipped"
    same_store(run_dir / "signals", tmp_path / "run2" / "signals")


def _logged(fn, log_dir, shared, task):
    """Run ``fn`` and leave a file per execution: task start row, worker pid, time."""
    Path(log_dir, f"{task[0]}_{os.getpid()}_{time.monotonic_ns()}").touch()
    time.sleep(0.15)
    return fn(shared, task)


class _Logging:
    """Wraps an executor: every task leaves a marker file (which worker ran it, how often)."""

    def __init__(self, inner, log_dir):
        self.inner, self.log_dir, self.workers = inner, str(log_dir), inner.workers

    def map(self, fn, tasks, shared):
        return self.inner.map(functools.partial(_logged, fn, self.log_dir), tasks, shared)


def _corpus(n=240, seed=3, n_topics=40, n_words=50):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(n_words)]
    toks = [frozenset(rng.choice(words, rng.integers(0, 7), replace=False).tolist()) for _ in range(n)]
    tops = [rng.choice(n_topics, rng.integers(0, 5), replace=False).tolist() for _ in range(n)]
    lin = rng.random((n_topics, n_topics)).astype(np.float32)
    lin = (lin + lin.T) / 2
    np.fill_diagonal(lin, 1.0)
    return toks, tops, lin


def test_worker_killed_mid_run(tmp_path):
    toks, tops, lin = _corpus()
    inp = pairs.build_inputs(toks, tops, lin, hist_bins=20, floor_topic=0.5, floor_summ=0.1)
    ids = [f"d{i}" for i in range(len(toks))]
    pairs.compute_all_pairs(inp, tmp_path / "local", ids, executor=LocalProcessExecutor(2), block=6, col_tile=100)
    logs = tmp_path / "logs"
    logs.mkdir()
    with DaskExecutor(None, 2) as ex:
        pids = ex.client.run(os.getpid)                       # worker address -> pid
        killed = []

        def killer():   # kill the worker that ran the 6th task, while 34 of 40 tasks remain
            while len(list(logs.iterdir())) < 6:
                time.sleep(0.01)
            first = sorted(logs.iterdir(), key=lambda p: int(p.name.split("_")[2]))[5]
            pid = int(first.name.split("_")[1])
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

        th = threading.Thread(target=killer, daemon=True)
        th.start()
        pairs.compute_all_pairs(inp, tmp_path / "dask", ids, executor=_Logging(ex, logs), block=6, col_tile=100)
        th.join(5)
    same_store(tmp_path / "local", tmp_path / "dask")
    assert killed and killed[0] in pids.values()
    runs: dict[int, list[int]] = {}
    for p in logs.iterdir():
        r0, pid, _ = p.name.split("_")
        runs.setdefault(int(r0), []).append(int(pid))
    assert sorted(runs) == list(range(0, 240, 6))             # every task ran
    again = {r0: w for r0, w in runs.items() if len(w) > 1}
    assert again, "the killed worker had tasks in flight: they must have run again"
    for r0, w in again.items():                               # only the killed worker's tasks ran again
        assert w.count(killed[0]) >= 1 and len(w) == 2, (r0, w)
    survivor = [pid for pid in pids.values() if pid != killed[0]][0]
    assert all(len(w) == 1 for w in runs.values() if killed[0] not in w)
    assert any(w == [survivor] for w in runs.values())
    assert len(again) < len(runs) // 2
    shutil.rmtree(logs)


def test_dedup_signatures_on_dask_equal_serial(dask_pool):
    from saber_lib.corpus import dedup

    rng = np.random.default_rng(0)
    sets = [{f"w{i} w{j}".encode() for i, j in rng.integers(0, 300, (rng.integers(0, 20), 2))} for _ in range(500)]
    serial = dedup.minhashes(sets, 112, 1)
    dist = dedup.minhashes(sets, 112, 1, executor=dask_pool, chunk=64)
    assert len(dist) == len(serial)
    assert all(np.array_equal(a.hashvalues, b.hashvalues) and a.hashvalues.dtype == b.hashvalues.dtype
               for a, b in zip(serial, dist))
    assert np.array_equal(serial[0].permutations, dist[0].permutations) and serial[0].scheme == dist[0].scheme
    assert serial[3].jaccard(serial[7]) == dist[3].jaccard(dist[7])


def _start_environ():
    """The environment this process started with (what malloc read), not ``os.environ`` now."""
    return dict(kv.split(b"=", 1) for kv in Path("/proc/self/environ").read_bytes().split(b"\0") if b"=" in kv)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_local_workers_start_with_one_malloc_arena(dask_pool):
    # in each worker process's start environment, so that its task thread allocates from the main heap
    starts = dask_pool.client.run(_start_environ)
    assert [env.get(b"MALLOC_ARENA_MAX") for env in starts.values()] == [b"1", b"1"]
