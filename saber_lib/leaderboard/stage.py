"""The leaderboard stage's recipes (what ``14_leaderboard`` computes around the report functions):
where the published files are, whether this run's retrievers join them, the provenance every caption
carries, the facts for the manifest and the contribution files. ``ctx`` is the stage's
:class:`~saber_lib.pipeline.context.StageContext`; ``params`` the notebook's parameters by name.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import polars as pl

from . import crosssystem, published
from .published import PublishedDir, System
from .report import Provenance


def published_folder(published_dir, data_dir) -> Path:
    """``published_dir`` when given, else the data directory's ``published/``."""
    return Path(published_dir) if published_dir else Path(data_dir) / "published"


def release_runs(ctx) -> tuple[bool, list[Path]]:
    """Whether this run was evaluated on the released benchmark (``evaluate.benchmark: released``),
    and the run directories whose retrievers join the published systems (this run's, or none: a
    benchmark built here has other queries and other ratings)."""
    evaluated = (ctx.run_dir / "evaluate" / "manifest.json").exists()
    on_release = evaluated and ctx.upstream_info("evaluate").get("benchmark") == "released"
    return on_release, [ctx.input("evaluate", "ndcg.parquet").parent.parent] if on_release else []


def provenance(pub_dir: PublishedDir, run_dirs: Sequence, params: Mapping) -> Provenance:
    """The files, runs and statistics settings (``lb_*`` keys and ``seed``) the tables are computed from."""
    return Provenance(published_files=[str(f) for f in pub_dir.files], run_dirs=[str(r) for r in run_dirs],
                      ci_scheme=params["lb_ci_scheme"], n_resamples=params["lb_n_resamples"], seed=params["seed"],
                      alpha=params["lb_alpha"], skipped=pub_dir.skipped, min_coverage=params["lb_min_coverage"])


def manifest_record(published_dir, systems: Sequence[System], pub_dir: PublishedDir, on_release: bool,
                    pairwise: pl.DataFrame, n_significant: int) -> dict:
    """What the manifest keeps: where the published files are, how many systems (and how many from
    runs), whether the run joined, the pairs tested and how many differ significantly."""
    return {"published_dir": str(published_dir), "n_systems": len(systems),
            "run_systems": len(systems) - len(pub_dir.systems), "on_release": on_release,
            "n_pairs": pairwise.height, "n_significant": n_significant, "backend": "published results (authors)"}


def contribution_name(retriever: str) -> str:
    """The authors' file name for a retriever (``<model>__p0.json``), ``:`` and ``/`` made ``_``."""
    return f"{retriever.replace(':', '_').replace('/', '_')}__p0.json"


def write_contributions(ctx, reference: System) -> list[Path]:
    """Every retriever this run evaluated, in the authors' result layout under ``contribute/``, aligned
    on the queries of ``reference`` (a published system); names sorted."""
    names = sorted(pl.read_parquet(ctx.input("evaluate", "ndcg.parquet"))["retriever"].unique())
    return [published.evaluation_file_from_run(ctx.run_dir, name, reference, ctx.path(f"contribute/{contribution_name(name)}"))
            for name in names]


def cross_system(ctx, published_dir, pub_dir: PublishedDir, run_dirs: Sequence, params: Mapping) -> str:
    """The cross-system readings (:mod:`saber_lib.leaderboard.crosssystem`) into the stage's
    ``cross_system/`` folder, from the published folder's ``mteb/leaderboard.csv`` and
    ``dedup_summaries.jsonl`` where it holds them: MTEB with this run's retrievers when they joined
    (``run_dirs``), the rephrased-copy rank of the published systems (a run's own is the robustness
    stage's ``rephrased_rank_vs_ndcg.parquet``). Records the facts; returns a line to print."""
    out = ctx.path("cross_system/.keep").parent
    tail = (f"Published results in {Path(published_dir)} ({len(pub_dir.confidence)} confidence files); this run's "
            f"retrievers: {'joined' if run_dirs else 'not on the release, left out'}.")
    mteb_file, dedup = Path(published_dir) / "mteb" / "leaderboard.csv", Path(published_dir) / "dedup_summaries.jsonl"
    facts, said = {}, []
    if mteb_file.is_file():
        _, f = crosssystem.write_mteb(out, mteb_file, pub_dir, run_dirs, params["lb_n_resamples"], params["seed"], tail)
        facts.update(f)
        said += [f"MTEB Retrieval vs statement-full ({k}): {v['n']} systems, Spearman {v['spearman']}"
                 for k, v in f["mteb_statement_full_retrieval"].items()]
    if dedup.is_file():
        _, f = crosssystem.write_rephrased(out, dedup, pub_dir, [], params["lb_n_resamples"], params["seed"], tail)
        facts.update(f)
        said += [f"rephrased-copy mean rank vs statement-full ({r['pool']}): {r['n']} systems, Spearman {r['spearman']}"
                 for r in f["rephrased_statement_full_mean_rank"]]
    (out / ".keep").unlink(missing_ok=True)
    ctx.record(**facts)
    return "\n".join(said) or f"{published_dir} holds no mteb/leaderboard.csv nor dedup_summaries.jsonl: no cross-system readings"
