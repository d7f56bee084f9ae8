"""The four study notebooks, executed headlessly (papermill, params/tiny.yaml) on a synthetic run
directory that follows the artifact contracts of CONTRIBUTING.md (so they are checked without the
upstream stages)."""
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from saber_lib.core import config as cfg
from saber_lib.core.data import write_json
from saber_lib.pipeline import runner
from saber_lib.pipeline.stages import BY_NAME

ROOT = Path(__file__).resolve().parent.parent

NODES = pl.DataFrame({
    "node_id": [0, 1, 2, 3, 4, 5, 6, 7],
    "parent_id": [-1, 0, 1, 1, 0, 4, 0, 6],
    "url": [f"https://mathworld/{i}" for i in range(8)],
    "title": ["Mathematics", "NumberTheory", "Congruences", "PrimeNumbers", "DiscreteMathematics",
              "Combinatorics", "Algebra", "Polynomials"],
    "depth": [0, 1, 2, 2, 1, 2, 1, 2],
    "path": [["Mathematics"], ["Mathematics", "NumberTheory"], ["Mathematics", "NumberTheory", "Congruences"],
             ["Mathematics", "NumberTheory", "PrimeNumbers"], ["Mathematics", "DiscreteMathematics"],
             ["Mathematics", "DiscreteMathematics", "Combinatorics"], ["Mathematics", "Algebra"],
             ["Mathematics", "Algebra", "Polynomials"]],
    "domain": [None, "Number Theory", "Number Theory", "Number Theory", "Combinatorics", "Combinatorics",
               "Algebra", "Algebra"],
})
TEMPLATES = [
    ("Find all integers $n$ such that $n^{k} \\equiv 1 \\pmod{7}$.", "Use Fermat's little theorem: $n^6 \\equiv 1$.", [2], "Number Theory"),
    ("Prove that there are infinitely many primes of the form \\(4m+3\\) with m = {k}.", "Suppose finitely many and consider $4P-1$.", [3], "Number Theory"),
    ("How many subsets of a set with {k} elements have an even number of elements?", "Pair subsets by toggling one element: $2^{{k}-1}$.", [5], "Combinatorics"),
    ("Find the roots of $x^2 - {k}x + 6 = 0$.", "Factor the quadratic \\[ (x-2)(x-3) \\] and read off the roots.", [7], "Algebra"),
    ("Count the lattice paths from $(0,0)$ to $({k},{k})$ that avoid the diagonal.", "Reflect the bad paths; the answer is a Catalan number $C_{k}$.", [5, 2], "Combinatorics"),
]


def synthetic_run(run_dir: Path, n_queries=5, K=3, seed=0):
    """A run directory with corpus, ontology, topics, select and tournament artifacts."""
    rng = np.random.default_rng(seed)
    docs = []
    for k in range(40):
        p, s, nodes, _ = TEMPLATES[k % len(TEMPLATES)]
        docs.append({"doc_id": f"syn:{k}", "source": "syn", "source_id": str(k),
                     "problem": p.replace("{k}", str(k + 2)), "solution": s.replace("{k}", str(k + 2)),
                     "node_ids": nodes})
    corpus = pl.DataFrame([{k: v for k, v in d.items() if k != "node_ids"} for d in docs])
    (run_dir / "corpus").mkdir(parents=True)
    corpus.write_parquet(run_dir / "corpus" / "corpus.parquet")
    (run_dir / "ontology").mkdir()
    NODES.write_parquet(run_dir / "ontology" / "nodes.parquet")
    dom = dict(zip(NODES["node_id"], NODES["domain"]))
    topics = pl.DataFrame({"doc_id": [d["doc_id"] for d in docs], "node_ids": [d["node_ids"] for d in docs],
                           "urls": [[f"https://mathworld/{n}" for n in d["node_ids"]] for d in docs],
                           "domains": [sorted({dom[n] for n in d["node_ids"]}) for d in docs],
                           "failed": [k == 39 for k in range(40)]})
    (run_dir / "topics").mkdir()
    topics.write_parquet(run_dir / "topics" / "topics.parquet")
    bench, ratings = [], []
    groups = ["topic-only"] * K + ["summary-only"] * K + ["both"] * K
    for q in range(n_queries):
        qid = f"syn:{q}"
        cands = rng.choice(np.arange(n_queries, 40), size=3 * K, replace=False)
        theta = rng.normal(size=3 * K) + np.array([0.0] * K + [0.4] * K + [1.2] * K)
        rating = 5 * (theta - theta.min()) / (theta.max() - theta.min())
        for pos, (c, g) in enumerate(zip(cands, groups)):
            bench.append({"query_id": qid, "query_domains": topics["domains"][q].to_list(), "cand_id": f"syn:{c}",
                          "position": pos, "group": g, "sim_topic": 0.9, "sim_summ": 0.3})
            ratings.append({"query_id": qid, "cand_id": f"syn:{c}", "position": pos, "group": g,
                            "theta": float(theta[pos]), "rating": float(rating[pos]), "wins": 1.0, "n_judged": 4})
    (run_dir / "select").mkdir()
    pl.DataFrame(bench).write_parquet(run_dir / "select" / "benchmark.parquet")
    (run_dir / "tournament").mkdir()
    pl.DataFrame(ratings).write_parquet(run_dir / "tournament" / "ratings.parquet")
    write_json(run_dir / "tournament" / "info.json", {"judge": "synthetic ratings (test fixture)"})
    write_json(run_dir / "topics" / "info.json", {"scorer": "synthetic topics (test fixture)"})


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    """The synthetic run and a record of each stage's first execution on it (``executed``: stage ->
    manifest), so the byte-identity check executes a stage once more instead of twice."""
    tmp = tmp_path_factory.mktemp("studies")
    run_dir = tmp / "run"
    synthetic_run(run_dir)
    prof = cfg.load_profile(ROOT / "params" / "tiny.yaml",
                            {"run.figures_dir": str(tmp / "figures"), "run.cache_dir": str(tmp / "cache")})
    ctx = runner.RunContext(prof, run_dir.resolve())
    return ctx, tmp, {}


def executed(study_run, stage: str) -> dict:
    """The manifest of the stage's first execution on the synthetic run (executed now if it has not run)."""
    ctx, _, done = study_run
    if stage not in done:
        done[stage] = runner.execute_stage(ctx, BY_NAME[stage], log=lambda *a: None)
    return done[stage]


@pytest.mark.pipeline
@pytest.mark.parametrize("stage", ["signal_ablation", "distributions", "math_vs_words", "judge_validation"])
def test_study_notebook_runs(study_run, stage):
    ctx, tmp, _ = study_run
    man = executed(study_run, stage)
    info = man["info"]
    assert "synthetic" in info["backends"]           # upstream backends reach captions and the manifest
    figs = [Path(p) for p in info["figures"]]
    assert figs and all(p.exists() and p.stat().st_size > 0 for p in figs)
    d = ctx.run_dir / stage
    if stage == "signal_ablation":
        curves = pl.read_parquet(d / "curves.parquet")
        assert curves.height == 3 * 9 and set(info["findings"]) >= {"both_rises_fastest", "summary_ahead_of_topic"}
        dom = pl.read_parquet(d / "domain_curves.parquet")     # queries 0, 1, 4: Number Theory; 2, 4: Combinatorics
        assert dom.group_by("domain").len().sort("domain").rows() == [
            ("Algebra", 27), ("Combinatorics", 27), ("Number Theory", 27)]
        n_q = dict(pl.read_parquet(d / "domain_auc.parquet").select("domain", "n_queries").unique().iter_rows())
        assert n_q == {"Algebra": 1, "Combinatorics": 2, "Number Theory": 3}
    if stage == "distributions":
        w = pl.read_parquet(d / "corpus_domains.parquet")
        assert w["weight"].sum() == pytest.approx(40)
        assert info["unassigned"]["corpus"] == pytest.approx(1.0)     # the one failed topic annotation
    if stage == "math_vs_words":
        pref = pl.read_parquet(d / "preferences.parquet")
        assert set(pref["retriever"]) == {"bm25", "jaccard", "minilm"}
        # the one words-only template (subsets) is dropped as "no math"
        assert info["n_kept"] + info["n_dropped"] == info["n_queries"] == 5
        assert info["dropped_reasons"] == {"no math": 1}
        by_arm = pl.read_parquet(d / "preferences_by_arm.parquet")     # the profile's arms: p0-p3
        assert by_arm["arm"].unique(maintain_order=True).to_list() == cfg.load_profile(
            ROOT / "params" / "tiny.yaml").values["evaluate"]["instruction_arms"]
        p0 = by_arm.filter(pl.col("arm") == "p0").drop("arm", "model_class", "role").sort("retriever", "domain")
        assert p0.equals(pref.sort("retriever", "domain").select(p0.columns))          # p0 is the arm-free run
        assert dict(by_arm.select("retriever", "role").unique().iter_rows()) == {
            "bm25": "control", "jaccard": "control", "minilm": "control"}
    if stage == "judge_validation":
        t = pl.read_parquet(d / "agreement.parquet")
        assert "SECOND JUDGE" in info["reference"] and not info["human_reference"]
        assert {"swiss ranking (the benchmark's)", "exhaustive ranking", "random ranking"} <= {m.split(" (")[0] + (" (the benchmark's)" if "benchmark" in m else "") for m in t["method"]}
        assert pl.read_parquet(d / "pairs.parquet").height == 10


@pytest.mark.parametrize("stage", ["signal_ablation", "math_vs_words", "judge_validation", "distributions"])
def test_parameters_cell_has_every_knob_and_no_outputs(stage):
    import ast

    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / BY_NAME[stage].notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].metadata.get("tags") == ["parameters"]
    names = {t.id for node in ast.parse(code[0].source).body if isinstance(node, ast.Assign) for t in node.targets}
    want = {"run_dir", "run_name", "seed", "data_dir", "cache_dir", "figures_dir"}
    for sec in BY_NAME[stage].sections:
        want |= {sec} if sec in cfg.DICT_SECTIONS else set(cfg.SCHEMA[sec])
    assert want <= names, sorted(want - names)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)


@pytest.mark.pipeline
@pytest.mark.parametrize("stage", ["signal_ablation", "judge_validation"])
def test_same_params_give_byte_identical_artifacts(study_run, stage):
    ctx, _, _ = study_run
    first = executed(study_run, stage)["output_hash"]       # the execution the test above checked
    second = runner.execute_stage(ctx, BY_NAME[stage], log=lambda *a: None)["output_hash"]
    assert first == second


@pytest.mark.pipeline
def test_judge_validation_uses_human_annotations_when_present(tmp_path):
    from saber_lib.validation.annotate_ui import AnnotationStore
    from saber_lib.studies.ablation import final_ranks
    from saber_lib.validation.agreement import sample_ranked_pairs

    run_dir = tmp_path / "run"
    synthetic_run(run_dir)
    prof = cfg.load_profile(ROOT / "params" / "tiny.yaml",
                            {"run.figures_dir": str(tmp_path / "figures"), "run.cache_dir": str(tmp_path / "cache"),
                             "judge_validation.jv_schedules": ["swiss"]})
    v = prof.values
    ratings = pl.read_parquet(run_dir / "tournament" / "ratings.parquet")
    pairs = sample_ranked_pairs(final_ranks(ratings), v["judge_validation"]["jv_pairs"],
                         np.random.default_rng(v["run"]["seed"]), v["judge_validation"]["jv_sampling"])
    alice, bob = AnnotationStore.for_run(run_dir, "alice"), AnnotationStore.for_run(run_dir, "bob")
    for k, (pid, q, a, b) in enumerate(pairs.select("pair_id", "query_id", "a", "b").iter_rows()):
        alice.save(pid, q, a, b, "a" if k % 2 else "tie")
        if k < 4:
            bob.save(pid, q, b, a, "b" if k % 2 else "a")     # bob saw the pair the other way round
    man = runner.execute_stage(runner.RunContext(prof, run_dir.resolve()), BY_NAME["judge_validation"], log=lambda *a: None)
    info = man["info"]
    assert info["human_reference"] and info["n_reference_labels"] == 14
    # k odd: both say a (1.0); k even: alice tie, bob b flipped to a (0.5) -> (1 + .5 + 1 + .5) / 4
    assert info["inter_annotator"] == [{"x": "alice", "y": "bob", "n": 4, "agreement": 0.75}]
