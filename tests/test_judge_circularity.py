"""The circularity guard of the proxy judge: its encoder must not be the model of a retriever the
profile evaluates (``evaluate.retrievers``); encoders the profile does not evaluate are allowed."""
from pathlib import Path

import numpy as np
import pytest

from saber_lib.core import config, names
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
    assert names.circular_judge(encoder, retrievers) == same


def test_profile_refuses_a_proxy_judge_on_an_evaluated_model():
    with pytest.raises(config.ProfileError) as e:
        config.load_profile(DEMO, {"tournament.judge_embed_model": "minilm-int8"})
    msg = str(e.value)
    assert "tournament.judge_embed_model" in msg and "'minilm'" in msg and "evaluate.retrievers" in msg
    assert "\n" not in msg
    with pytest.raises(config.ProfileError, match="'mpnet'"):
        config.load_profile(DEMO, {"tournament.judge_embed_model": "mpnet-bf16",
                                   "evaluate.retrievers": ["bm25", "mpnet"]})


def test_profile_allows_encoders_it_does_not_evaluate():
    for enc in ("mpnet-bf16", "e5-small", "use-m"):
        p = config.load_profile(DEMO, {"tournament.judge_embed_model": enc})
        assert p.values["tournament"]["judge_embed_model"] == enc
    # not a proxy judge: the encoder key is not used, so not checked
    config.load_profile(DEMO, {"tournament.judge": "simulated", "tournament.judge_embed_model": "minilm"})


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
