"""Parameter profiles: load a YAML profile (with ``inherit:``), validate it against the schema.

A profile is a mapping of sections (``run``, ``corpus``, ``topics``, ...) to keys. ``params/paper.yaml``
holds every key with the paper's value; other profiles name a parent with ``inherit: FILE`` (relative
to their own folder) and override what they change. Validation happens before anything runs: an
unknown section or key, a missing key, a wrong type or an out-of-range value raises one
:class:`ProfileError` naming the key and the file it came from. So do, at load time: a key written
twice in one YAML mapping (file and line), a ``.nan`` / ``.inf`` number, and cross-key rules (blamed
on the file that set the deciding key). The profile's ``run.plugins`` (and the installed entry points,
``core.plugins``) are imported before the cross checks, so the names they register are known to
every check. A judge-valued key (``Spec(kind="judge")``) is checked by the judge registry,
``saber_lib.judging``, which registers its check in ``config_types.SPEC_CHECKS`` when imported (every
pipeline command imports it). The names the lower layers cannot see (retrievers, encoders, open-corpus
systems, corpus sources) are checked when a run loads the profile (``pipeline.runner.load_run_profile``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .config_types import PROB, SPEC_CHECKS, Any_, Bool, EnvName, Float, Int, List, Map, ProfileError, Spec, Str
from .config_yaml import load_layers
from . import plugins
from .data import PROJECT_ROOT
from .scales import DESIGN_MAPPINGS, duplicate_scheme, scheme_error

SOURCES = ("imo_proofbench", "harp_proof", "aime", "olympiadbench", "omni_math_rule", "math",
           "proofnet", "minif2f", "champ")
INSTRUCTION_ARMS = ("p0", "p1", "p2", "p3")   # = embed.instructions.ARMS (checked by a test)
DOMAINS = ("Algebra", "Geometry", "Number Theory", "Combinatorics", "Calculus and Analysis")

# ----------------------------------------------------------------------------- the schema
# section -> key -> type. Key names are unique across sections (notebooks get them flattened).
SCHEMA: dict[str, dict[str, Any]] = {
    "run": {
        "seed": Int(0),
        "data_dir": Str(nullable=True),
        "cache_dir": Str(),
        "figures_dir": Str(),
        "threads": Int(0, 1024),
        "executor": Str(("local", "dask")),
        "dask_scheduler": Str(nullable=True),
        "dask_workers": Int(0, 4096),
        "verify_after_h": Float(0.0, 1e6),
        "plugins": List(Str()),       # modules importable from the working directory (core/plugins.py)
    },
    "llm": {
        "backend": Str(("vllm", "openai", "llamacpp", "replay", "none")),
        "model": Str(),
        "model_path": Str(nullable=True),
        "base_urls": List(Str(), shown=False),   # a URL may hold a password: never quoted in an error
        "api_key_env": EnvName(),     # the NAME of the variable that holds the key, never the key
        "tensor_parallel_size": Int(1, 64),
        "max_model_len": Int(256),
        "max_concurrency": Int(1, 4096),
        "timeout_s": Float(0.1),
        "max_retries": Int(0, 100),
        "temperature": Float(0.0, 2.0),
        "reasoning_effort": Str(("low", "medium", "high"), nullable=True),
        "max_tokens": Int(1),
        "cache": Str(("run", "shared")),
        "n_ctx": Int(256),
        "logprob_judge": Bool(),
        "retry_backoff_s": Float(0.0, 600.0),
        "cpu_threads": Int(0, 1024),
        "prompt_cache": Bool(),
        "engine_kwargs": Map(Any_(), shown=False),   # may hold hf_token, api_key: never quoted in an error
        "trust_env": Bool(),
        "max_failure_rate": PROB,
        "server_concurrency": Int(0, 4096),
        "server_retry_s": Float(0.0, 3600.0),
        "cache_flush_every": Int(1, 100000),
        "cache_flush_s": Float(0.0, 3600.0),
        "guided_json": Bool(),
        "text_max_words": Int(0),
        "cassette": Str(nullable=True, path="project"),
        "record": Str(nullable=True),
    },
    "corpus": {
        "sources": List(Str(), min_len=1),   # a loader of corpus.loaders (SOURCES, or a plugin's)
        "max_records_per_source": Int(0, 10_000_000),   # 0 = all; the largest source has 12,500
        "shingle_size": Int(1, 50),
        "minhash_bands": Int(1, 512),
        "minhash_rows": Int(1, 512),
        "minhash_seed": Int(0),
        "near_dup_threshold": Float(0.0, 1.0),
        "near_dup_number_check": Bool(),
        "allow_empty_sources": Bool(),
    },
    "ontology": {
        "ontology_file": Str(path="data"),
    },
    "topics": {
        "topic_scorer": Str(("llm", "embedding")),
        "topic_embed_model": Str(),
        "tau": Float(0.0, 1.0),
        "topic_max_problems": Int(0),
        "topic_retries": Int(0, 20),
        "topic_score_root": Bool(),
        "topic_embed_score": Str(("cosine", "exp")),
        "topic_embed_temperature": Float(1e-6),
        "topic_embed_calibration": Str(("none", "center", "zscore")),
        "topic_embed_max_chunks": Int(0),
        "topic_embed_deep_temperature": Float(1e-6, nullable=True),
        "topic_embed_calibrate_from_depth": Int(0, 20),
        "topic_embed_subtree_weight": Float(0.0),
        "topic_embed_max_chars": Int(0),
        "topic_llm_sample": Int(0),
        "topic_llm_max_depth": Int(0),
    },
    "summaries": {
        "summarizer": Str(("llm", "extractive")),
        "summary_embed_model": Str(),
        "core_idea_max_words": Int(1, 200),
        "summary_retries": Int(0, 20),
        "summary_max_problems": Int(0),
        "summary_llm_sample": Int(0),
    },
    "signals": {
        "jaccard_empty": PROB,
        "hist_bins": Int(2, 10000),
        "pair_floor_topic": PROB,
        "pair_floor_summ": PROB,
        "memory_budget_mb": Int(16, 16 * 2**20),        # up to 16 TiB (a cluster's whole memory)
        "workers": Int(0, 1024),
    },
    "thresholds": {
        "K": Int(1),
        "Q_min": Int(1),
        "threshold_rule": Str(("paper", "strictest", "quantile", "fixed")),
        "threshold_quantile": PROB,
        "threshold_search": Str(("topic_first", "summ_first")),
        "tau_topic": Float(0.0, 1.0, nullable=True),
        "tau_summ": Float(0.0, 1.0, nullable=True),
    },
    "select": {
        "n_queries": Int(1),
        "domains": List(Str(DOMAINS), min_len=1),
        "fill_shortfall": Bool(),
    },
    "tournament": {
        "rounds": Int(1, 1000),
        "schedule": Str(("swiss", "exhaustive", "random", "adaptive")),
        "judge": Spec(kind="judge"),               # a judge spec (saber_lib.judging.registry), e.g. llm | proxy
        "judge_embed_model": Str(),
        "position_swap": Bool(),
        "swap_disagreement": Str(("tie", "reask")),
        "judge_retries": Int(0, 20),
        "judge_sim_agreement": Float(0.5, 0.999),
        "bt_alpha": Float(0.0),
        "rating_top": Float(0.0),
        "tournament_max_queries": Int(0),
        "rating_draws": Int(1),
        "rating_draw_method": Str(("outcomes", "judgments")),
    },
    "inversions": {
        "inv_max_rounds": Int(1, 1000),
        "inv_candidates": Int(2),
        "inv_sim_queries": Int(1),
        "inv_sim_agreement": Float(0.5, 0.999),
        "inv_real_queries": Int(0),
    },
    "evaluate": {
        "ndcg_k": Int(1),
        "retrievers": List(Str(), min_len=1),
        "settings": List(Str(("statement-full", "full-full", "statement-statement")), min_len=1),
        "bm25_k1": Float(0.0),
        "bm25_b": Float(0.0, 1.0),
        "n_bootstrap": Int(1, 1_000_000),               # the paper: 1,000 resamples
        "ci_level": Float(0.5, 0.9999),
        "mteb_scores": Map(Float()),
        "embed_max_chunks": Int(0),        # 0 = embed every chunk of a long text (the paper)
        "embed_batch_size": Int(1, 4096),
        "export_beir": Bool(),
        "benchmark": Str(("built", "released")),     # built: this run's select + tournament; released: stage `released`
        "tie_policy": Str(("position", "expected")),  # tied scores: candidate order, or the expectation over tie orders
        "run_min_match": Float(0.0, 1.0),  # least share of a query's candidates a TREC run must list
        "rescaling_schemes": List(Str()),  # "[lo,hi] exp|linear [rank] [round]" (metrics/rescaling.py)
        "instruction_arms": List(Str(INSTRUCTION_ARMS), min_len=1),  # p0 = no instruction (embed/instructions.py)
        "arm_permutations": Int(1),       # sign-flip draws of the arms' paired test
        "latency_settings": List(Str(("statement-full", "full-full", "statement-statement"))),  # timed per query
        "stability_splits": Int(1),        # split-half pairs of disjoint query sets per query count (metrics/stability.py)
        "stability_subsets": Int(1),       # random query subsets per query count for the discriminative power
        "stability_permutations": Int(1),  # sign-flip patterns and bootstrap resamples of its paired tests
        "stability_alpha": Float(0.0001, 0.5),
        "stability_target": Float(0.0, 0.9999),   # split-half tau whose query count is reported
    },
    "released": {
        "benchmark_dir": Str(nullable=True, path="data"),         # the authors' released sets; relative = inside the data dir
        "released_candidates": Int(1),               # candidates per query (the release: 150)
    },
    "leaderboard": {
        "published_dir": Str(nullable=True, path="project"),         # null: <data dir>/published
        "lb_task": Str(("statement-full", "full-full", "statement-statement")),
        "lb_ci_scheme": Str(("correct", "authors")),
        "lb_n_resamples": Int(1),
        "lb_alpha": Float(0.0001, 0.5),
        "lb_min_coverage": Float(0.0, 1.0),          # least share of the task's queries a ranked system scored
    },
    "signal_ablation": {
        "ablation_bootstrap": Int(1),
        "ablation_ci_level": Float(0.5, 0.9999),
    },
    "math_vs_words": {
        "mvw_top_n": Int(1),
        "latex_normalizer": Str(("deterministic", "llm")),
        "mvw_retrievers": List(Str(), min_len=1),
        "mvw_selected": List(Str()),
        "mvw_format_retries": Int(0, 20),
        "ties": Str(("exclude", "include")),   # exclude: shares over the queries with a winner (the authors')
    },
    "judge_validation": {
        "jv_pairs": Int(1), "jv_deltas": List(Int(0), min_len=1), "jv_majority_votes": Int(1),
        "jv_second_judge": Spec(kind="judge"), "jv_sampling": Str(("uniform_pair", "uniform_gap")),
        "jv_schedules": List(Str(("swiss", "exhaustive", "random"))), "jv_annotator": Str(),
        "jv_reference": Str(nullable=True, path="data"),          # labelled triples (JSONL/CSV); relative = inside the data dir
        "jv_grades": Str(nullable=True, path="data"),             # graded candidates, 0-100 (JSONL/CSV); relative = inside the data dir
        "jv_grade_min_gap": Float(0.0, 100.0), "jv_grade_pairs": Int(0),   # graded pairs: grades this far apart; 0 = all per query
        "jv_n_resamples": Int(1), "jv_ci_level": Float(0.5, 0.9999),   # query bootstrap of the agreement with it
        "jv_design_rounds": List(Int(0)),      # rating-design ceiling: tournament rounds tried; 0 = every pair
        "jv_design_rescalings": List(Str()),   # its relevance: min-max (the benchmark's), theta, or a rescaling scheme
    },
    "distributions": {
        "example_query": Int(0),
        "dist_top_k": Int(1),
    },
    "open_corpus": {
        "oc_systems": List(Str(), min_len=1),
        "oc_representations": List(Str(("statement", "full", "summary")), min_len=1),
        "oc_ks": List(Int(1), min_len=1),
        "oc_relevance_cutoff": Float(0.0),
        "oc_pool_depth": Int(1),
        "oc_first_stage_n": Int(1),
        "oc_hnsw_M": Int(2, 512),
        "oc_hnsw_ef_construction": Int(1),
        "oc_hnsw_ef": Int(1),
        "oc_judge_pool": Bool(),
        "oc_pool_rounds": Int(1, 1000),
        "oc_max_pool_per_query": Int(0),
        "oc_budget_depths": List(Int(1), min_len=1),
    },
    "robustness": {
        "rob_setting": Str(("statement-full", "full-full", "statement-statement")),
        "flip_pairs": Int(0),
        "flip_judges": List(Spec(kind="judge")),
        "flip_slow_pairs": Int(0),
        "flip_slow_judges": List(Spec(kind="judge")),
        "flip_transformations": List(Str(("rename_variables", "latex_to_words", "words_to_latex", "number_decimal",
                                          "number_fraction", "number_slash", "sentence_order"))),
        "mem_retrievers": List(Str()),
        "mem_control": Str(),                        # the retriever whose drop the others are compared with
        "mem_variants": List(Str(("rename_variables", "latex_to_words", "words_to_latex", "number_decimal",
                                  "number_fraction", "number_slash", "sentence_order")), min_len=1),
        "mem_llm_paraphrase": Bool(),
        "mem_paraphrase_retries": Int(0, 20),        # new calls for an empty or failed paraphrase
        "mem_permutations": Int(1),
        "mem_alpha": PROB,
        # a rephrased copy's rank (robustness/rephrased_rank.py)
        "rr_retrievers": List(Str()),                # [] = evaluate.retrievers (TREC runs left out)
        "rr_setting": Str(("statement-full", "full-full", "statement-statement")),
        "rr_rewriters": List(Str()),                 # chained when there is no LLM backend
        "rr_corpus_systems": List(Str()),            # bm25 | tfidf | an encoder; [] = no corpus pool
        "rr_corpus_max_queries": Int(0),             # 0 = every query
        "stop_rule": Str(("stable", "plateau", "either")),
        "stop_tol": Float(0.0),
        "stop_min_shrink": PROB,
        "stop_window": Int(1),
        "stop_min_rounds": Int(1),
        "stop_draws": Int(2),
        "stop_on_run": Bool(),
        "stop_sim_queries": Int(0),
        "stop_sim_candidates": Int(2),
        "stop_alpha": PROB,
        "stop_permutations": Int(1),
    },
}


# Sections injected into notebooks as one dict named after the section (not flattened).
DICT_SECTIONS = ("llm",)


def flat_keys() -> dict[str, str]:
    """key -> section for the flattened sections; raises if two sections use one key name."""
    out: dict[str, str] = {}
    for sec, keys in SCHEMA.items():
        if sec in DICT_SECTIONS:
            continue
        for k in keys:
            if k in out:
                raise RuntimeError(f"parameter key {k!r} is used by sections {out[k]} and {sec}")
            out[k] = sec
    return out


# ----------------------------------------------------------------------------- loading
@dataclass
class Profile:
    path: Path
    values: dict[str, dict[str, Any]]
    origin: dict[tuple[str, str], Path]  # (section, key) -> file that set it

    @property
    def name(self) -> str:
        return self.path.stem

    def __repr__(self) -> str:
        # not the values: a base URL may hold a password (llm.base_urls); see saber_lib.llm.redact
        return f"Profile({str(self.path)!r}, {sum(len(v) for v in self.values.values())} keys)"

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.values[name])

    def flat(self, sections) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in sections:
            out.update(self.values[s])
        return out

    def hash_of(self, sections) -> str:
        payload = {s: self.values[s] for s in sections}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


PAPER_PROFILE = PROJECT_ROOT / "params" / "paper.yaml"


@lru_cache(maxsize=1)
def paper_profile() -> Profile:
    """``params/paper.yaml``: the paper's value of every key, the one place each default lives (the
    schema above holds types and ranges only; notebooks' parameters cells are generated from it)."""
    return load_profile(PAPER_PROFILE)


def load_profile(path, overrides: dict | None = None) -> Profile:
    """Load, merge and validate a profile. ``overrides`` is ``{"section.key": value}``."""
    path = Path(path)
    values: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
    origin: dict[tuple[str, str], Path] = {}
    layers = load_layers(path)
    if overrides:
        ov: dict[str, dict] = {}
        for dotted, v in overrides.items():
            sec, _, key = dotted.partition(".")
            ov.setdefault(sec, {})[key] = v
        layers.append((Path("<command line>"), ov))
    for file, data in layers:
        for sec, keys in data.items():
            if sec not in SCHEMA:
                raise ProfileError(f"{file}: unknown section {sec!r} (known: {', '.join(SCHEMA)})")
            if not isinstance(keys, dict):
                raise ProfileError(f"{file}: section {sec!r} must be a mapping")
            for key, v in keys.items():
                if key not in SCHEMA[sec]:
                    raise ProfileError(f"{file}: unknown key {sec}.{key}")
                err = SCHEMA[sec][key].check(v)
                if err:
                    raise ProfileError(f"{file}: {sec}.{key}: {err}")
                values[sec][key] = v
                origin[(sec, key)] = file
    for sec, keys in SCHEMA.items():
        for key in keys:
            if key not in values[sec]:
                raise ProfileError(f"{path}: missing key {sec}.{key} (set it in the profile or its parent)")
    prof = Profile(path=path.resolve() if path.exists() else path, values=values, origin=origin)
    _load_plugins(prof)
    _cross_checks(prof)
    return prof


def _load_plugins(p: Profile) -> None:
    """Import the profile's ``run.plugins`` (from the working directory) and the installed entry
    points, so that the registries know their names before any check reads them."""
    try:
        plugins.load_plugins(p.values["run"]["plugins"])
        plugins.load_entry_points()
    except plugins.PluginError as e:
        raise ProfileError(f"{p.origin.get(('run', 'plugins'), p.path)}: run.plugins: {e}") from None


def _cross_checks(p: Profile) -> None:
    def where(sec, key):
        return p.origin.get((sec, key), p.path)

    def fail(sec, key, msg):
        raise ProfileError(f"{where(sec, key)}: {sec}.{key}: {msg}")

    src = p.values["corpus"]["sources"]
    if len(set(src)) != len(src):
        fail("corpus", "sources", "a source is listed twice")

    th = p.values["thresholds"]
    if th["threshold_rule"] == "fixed":
        unset = [k for k in ("tau_topic", "tau_summ") if th[k] is None]
        if unset:
            # blame the file that chose 'fixed': that is where the user has to add the taus
            fail("thresholds", "threshold_rule",
                 "'fixed' needs " + " and ".join(f"thresholds.{k}" for k in unset)
                 + " to be set (now null, from " + ", ".join(str(where("thresholds", k)) for k in unset) + ")")

    ev = p.values["evaluate"]
    untimed = [s for s in ev["latency_settings"] if s not in ev["settings"]]
    if untimed:
        fail("evaluate", "latency_settings", f"{', '.join(map(repr, untimed))} not in evaluate.settings "
                                             f"({', '.join(ev['settings'])}): only a setting the stage scores is timed")
    for text in p.values["evaluate"]["rescaling_schemes"]:
        if scheme_error(text):
            fail("evaluate", "rescaling_schemes", scheme_error(text))
    for text in p.values["judge_validation"]["jv_design_rescalings"]:
        if text not in DESIGN_MAPPINGS and scheme_error(text):
            fail("judge_validation", "jv_design_rescalings",
                 f"{text!r} is neither one of {', '.join(DESIGN_MAPPINGS)} nor a rescaling scheme: {scheme_error(text)}")
    if duplicate_scheme(p.values["evaluate"]["rescaling_schemes"]):
        fail("evaluate", "rescaling_schemes", duplicate_scheme(p.values["evaluate"]["rescaling_schemes"]))
    extra = [n for n in p.values["math_vs_words"]["mvw_selected"]
             if n not in p.values["math_vs_words"]["mvw_retrievers"]]
    if extra:
        fail("math_vs_words", "mvw_selected", f"{extra} not in math_vs_words.mvw_retrievers")

    for sec, keys in SCHEMA.items():   # spec-valued keys, by the registry of their kind (plugins loaded)
        for key, typ in keys.items():
            spec = typ.item if isinstance(typ, List) else typ
            check = SPEC_CHECKS.get(spec.kind) if isinstance(spec, Spec) else None
            values = p.values[sec][key] if isinstance(typ, List) else [p.values[sec][key]]
            for v in values if check else ():
                err = check(f"{sec}.{key}", v, p.values)
                if err:
                    fail(sec, key, err)
