"""StageContext.input: only a declared input stage's artifacts, and a clear error otherwise."""
import pytest

from saber_lib.pipeline import stages
from saber_lib.pipeline.context import StageContext, StageNotRun, UndeclaredInput


def test_input_of_a_declared_stage_and_refusal_of_an_undeclared_one(tmp_path):
    (tmp_path / "run" / "select").mkdir(parents=True)
    (tmp_path / "run" / "select" / "benchmark.parquet").write_bytes(b"x")
    (tmp_path / "run" / "evaluate").mkdir()
    (tmp_path / "run" / "evaluate" / "ndcg.parquet").write_bytes(b"x")
    ctx = StageContext(tmp_path / "run", "tournament", figures_dir=tmp_path / "fig")
    assert ctx.input("select", "benchmark.parquet") == tmp_path / "run" / "select" / "benchmark.parquet"
    # the file exists, but the tournament does not read the evaluation: refused, naming both stages
    with pytest.raises(UndeclaredInput, match=r"stage 'tournament' reads 'ndcg.parquet' of stage 'evaluate', which is "
                                              r"not one of its declared inputs \(corpus, select\)"):
        ctx.input("evaluate", "ndcg.parquet")
    with pytest.raises(StageNotRun, match="run stage 'corpus' first"):   # declared but not run
        ctx.input("corpus", "corpus.parquet")


def test_inputs_a_profile_may_add_are_declared(tmp_path):
    # evaluate reads the released benchmark, and the leaderboard the evaluation, only under some profiles
    ev = StageContext(tmp_path / "run", "evaluate", figures_dir=tmp_path / "fig")
    with pytest.raises(StageNotRun):
        ev.input("released", "ratings.parquet")
    with pytest.raises(UndeclaredInput, match="stage 'evaluate' reads 'x' of stage 'robustness'"):
        ev.input("robustness", "x")
    lb = StageContext(tmp_path / "run", "leaderboard", figures_dir=tmp_path / "fig")
    with pytest.raises(UndeclaredInput, match=r"declared inputs \(evaluate\)"):
        lb.input("tournament", "ratings.parquet")


def test_every_profile_dependency_is_a_declared_input():
    for bench in ("built", "released"):
        for grades in (None, "grades.jsonl"):
            for s in stages.STAGES:
                if s.deps_of is None:
                    continue
                v = {"evaluate": {"benchmark": bench}, "judge_validation": {"jv_grades": grades}}
                assert set(s.deps_of(v)) <= set(s.declared_inputs()), (s.name, bench)
    assert {s.name for s in stages.STAGES if s.deps_of is not None} == {"evaluate", "leaderboard", "judge_validation"}
    jv = stages.BY_NAME["judge_validation"]
    assert "evaluate" not in jv.deps_of({"judge_validation": {"jv_grades": None}})
    assert "evaluate" in jv.deps_of({"judge_validation": {"jv_grades": "grades.jsonl"}})


def test_a_notebook_outside_the_pipeline_is_not_checked(tmp_path):
    (tmp_path / "run" / "a").mkdir(parents=True)
    (tmp_path / "run" / "a" / "f.txt").write_text("1")
    ctx = StageContext(tmp_path / "run", "my_own_study", figures_dir=tmp_path / "fig")
    assert ctx.input("a", "f.txt").read_text() == "1"
