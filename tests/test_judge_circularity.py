"""The circularity guard of the proxy judge: its encoder must not be the model of a retriever the
profile evaluates (``evaluate.retrievers``); encoders the profile does not evaluate are allowed."""
from pathlib import Path

import numpy as np
import pytest

from saber_lib.core import config
from saber_lib.pipeline.runner import load_run_profile
from saber_lib.retrieval.registry import circular_judge
from saber_lib import embed
from saber_lib.judging import judges
from saber_lib.judging.registry import JudgeSettings, build_judge
from saber_lib.judging.spec_judges import judge_from_profile

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "params" / "demo.yaml"


@pytest.mark.parametrize("encoder, retrievers, same", [
    ("minilm", ["bm25", "minilm"], "minilm"),
    ("minilm-int8", ["bm25", "minilm"], "minilm"),          # the same weights, quantized
    ("mpnet-bf16", ["tfidf", "mpnet"], "mpnet"),            # the same weights, another precision
    ("mpnet-bf16", ["bm25", "minilm", "paraphrase-minilm-l3"], None),   # a family member, not the model
    ("e5-small", ["bm25", "minilm"], None),
    ("use-m", ["bm25", "e5-small", "run:x.trec"], None),
])
def test_circular_judge(encoder, retrievers, same):
    assert circular_judge(encoder, retrievers) == same


def test_profile_refuses_a_proxy_judge_on_an_evaluated_model():
    with pytest.raises(config.ProfileError) as e:
        load_run_profile(DEMO, {"tournament.judge_embed_model": "minilm-int8"})
    msg = str(e.value)
    assert "tournament.judge_embed_model" in msg and "'minilm'" in msg and "evaluate.retrievers" in msg
    assert "\n" not in msg
    with pytest.raises(config.ProfileError, match="'mpnet'"):
        load_run_profile(DEMO, {"tournament.judge_embed_model": "mpnet-bf16",
                                   "evaluate.retrievers": ["bm25", "mpnet"]})


def test_profile_allows_encoders_it_does_not_evaluate():
    for enc in ("mpnet-bf16", "e5-small", "use-m"):
        p = load_run_profile(DEMO, {"tournament.judge_embed_model": enc})
        assert p.values["tournament"]["judge_embed_model"] == enc
    # not a proxy judge: the encoder key is not used, so not checked
    load_run_profile(DEMO, {"tournament.judge": "simulated", "tournament.judge_embed_model": "minilm"})


class Fake:
    name, model_id, dim, max_tokens, symmetric = "fake", "fake-1", 2, None, True

    def chunks(self, text, kind="document"):
        return [text]

    def encode(self, texts, kind="document", batch_size=32):
        return np.array([[1.0, 0.0] if "x" in t else [0.6, 0.8] for t in texts], dtype=np.float32)


def test_judge_construction_checks_the_evaluated_retrievers(monkeypatch):
    monkeypatch.setattr(embed, "get_encoder", lambda name, *a, **k: Fake())
    with pytest.raises(ValueError, match="'mpnet', an evaluated retriever"):
        judge_from_profile(JudgeSettings.paper(judge="proxy", judge_embed_model="mpnet-bf16", evaluated=("bm25", "mpnet")))
    j = judge_from_profile(JudgeSettings.paper(judge="proxy", judge_embed_model="mpnet-bf16", evaluated=("bm25", "minilm")))
    assert j.margins([("x q", "x a", "b")]) == pytest.approx([1.0 - 0.6])
    assert j.judge_pairs([("x q", "x a", "b"), ("x q", "b", "x a")]) == [1, 2]
    # evaluated unknown (a judge built outside a profile): every registered retriever is refused
    with pytest.raises(ValueError, match="evaluated retriever"):
        judges.ProxyJudge("mpnet-bf16")
    # from a stage's parameters: evaluate.retrievers when the stage has them
    params = {"judge": "proxy", "judge_embed_model": "minilm-bf16", "cache_dir": None, "judge_retries": 0,
              "llm": {}, "seed": 0, "judge_sim_agreement": 0.78, "position_swap": False, "swap_disagreement": "tie",
              "retrievers": ["bm25", "minilm"]}
    with pytest.raises(ValueError, match="'minilm', an evaluated retriever"):
        judge_from_profile(JudgeSettings.from_params(params))
    assert judge_from_profile(JudgeSettings.from_params({**params, "retrievers": ["bm25"]})).name == "proxy:fake-cosine"
    # a proxy judge named outside the tournament (judge-check, the panel) may use any encoder
    assert build_judge("proxy:minilm-bf16").name == "proxy:fake-cosine"


# ----------------------------------------------------------------------------- retriever:<name> judges
def test_a_retriever_judge_orders_candidates_by_the_retrievers_score_of_the_whole_query():
    from rank_bm25 import BM25Okapi
    from saber_lib.judging.tournament import Doc
    q = Doc("q", "Count the subsets of a set with n elements.", "Each element is in or out: 2^n subsets.")
    cands = [Doc("a", "How many subsets does a 5-element set have?", "Each element is in or out, so 2^5."),
             Doc("b", "Find the area of a circle of radius 3.", "The area is pi r^2 = 9 pi."),
             Doc("c", "Choose 2 elements out of a set of 6.", "Binomial coefficient 15.")]
    j = build_judge("retriever:bm25")
    got = j.candidate_scores([(q, c) for c in cands])
    # independently: rank_bm25 fitted on the three candidates' whole texts, the whole query text as the query
    tok = lambda t: __import__("re").findall(r"\w+", t.lower())                       # noqa: E731
    from saber_lib.retrieval.registry import get_retriever
    want = get_retriever("bm25").score(q.text, [c.text for c in cands])
    assert got == pytest.approx(list(want))
    assert BM25Okapi([tok(c.text) for c in cands]).get_scores(tok(q.text)).argmax() == int(np.argmax(got)) == 0
    # pairwise: the higher-scored candidate wins whichever is shown first; the margin is the difference
    ans = j.answers([(q, cands[0], cands[1]), (q, cands[1], cands[0])])
    assert ans.labels == ["a", "b"] and ans.margins == pytest.approx([got[0] - got[1], got[1] - got[0]])
    # a later call with the same documents reuses the fit; one that brings a new document refits on all
    assert j.candidate_scores([(q, cands[2])]) == pytest.approx([got[2]])
    d = Doc("d", "Subsets of a set with n elements, counted.", "2^n.")
    refit = get_retriever("bm25").score(q.text, [c.text for c in cands] + [d.text])
    assert j.candidate_scores([(q, d), (q, cands[0])]) == pytest.approx([refit[3], refit[0]])


def test_a_judge_made_of_an_evaluated_retriever_may_not_rate_the_benchmark():
    with pytest.raises(config.ProfileError, match="retriever:bm25-a0 is an evaluated retriever"):
        load_run_profile(DEMO, {"tournament.judge": "retriever:bm25-a0"})
    # a blend asks both of its sides: the proxy side's guard and the retriever side's
    with pytest.raises(config.ProfileError, match="retriever:tfidf is an evaluated retriever"):
        load_run_profile(DEMO, {"tournament.judge": "blend:proxy:mpnet-bf16+retriever:tfidf"})
    with pytest.raises(config.ProfileError, match="'minilm'"):
        load_run_profile(DEMO, {"tournament.judge": "blend:proxy:minilm+signal:summary"})
    p = load_run_profile(DEMO, {"tournament.judge": "retriever:bm25-a0", "evaluate.retrievers": ["bm25", "minilm"]})
    assert p.values["tournament"]["judge"] == "retriever:bm25-a0"
    with pytest.raises(ValueError, match="evaluated retriever"):
        judge_from_profile(JudgeSettings.paper(judge="retriever:bm25", evaluated=("bm25", "minilm")))
    for bad, why in (("retriever", "name a registered retriever"), ("retriever:nope", "unknown retriever"),
                     ("retriever:run:x.trec", "TREC run")):
        with pytest.raises(Exception, match=why):
            build_judge(bad)
