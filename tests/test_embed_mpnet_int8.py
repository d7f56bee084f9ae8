"""mpnet-int8: all-mpnet-base-v2 exported to ONNX and quantized to int8 in the cache, from the packaged
weights (no download); its vectors against the fp32 model's, and the built model reused."""
import numpy as np
import pytest

from conftest import extra_module

pytestmark = pytest.mark.pipeline

TEXTS = [
    "Problem: Find all real x with x^2 - 5x + 6 = 0.\n\nSolution: Factor as (x-2)(x-3) = 0, so x = 2 or x = 3.",
    "Problem: Solve t^2 - 7t + 12 = 0 over the reals.\n\nSolution: (t-3)(t-4) = 0 gives t = 3 or t = 4.",
    "Problem: How many ways can 5 books be arranged on a shelf?\n\nSolution: 5! = 120 orderings.",
]


def test_int8_mpnet_is_built_once_and_keeps_the_fp32_models_neighbours(tmp_path):
    extra_module("onnx", "embed")
    embed = extra_module("saber_lib.embed", "embed")
    from saber_lib.embed import registry

    onnx_path = registry.mpnet_int8_onnx(tmp_path)
    stamp = onnx_path.stat().st_mtime_ns
    assert registry.mpnet_int8_onnx(tmp_path) == onnx_path and onnx_path.stat().st_mtime_ns == stamp   # built once
    q = embed.get_encoder("mpnet-int8", cache_dir=tmp_path)
    f = embed.get_encoder("mpnet", cache_dir=tmp_path)
    assert "int8" in q.model_id and q.model_id != f.model_id and q.dim == f.dim == 768
    Q = embed.l2_normalize(embed.embed(q, TEXTS, None, kind="document"))
    F = embed.l2_normalize(embed.embed(f, TEXTS, None, kind="document"))
    # the same model at lower precision: each text's vector stays close to its fp32 vector ...
    assert (np.sum(Q * F, axis=1) > 0.7).all()
    # ... and the two quadratic equations stay each other's nearest neighbour, as in fp32
    for X in (Q, F):
        assert X[0] @ X[1] > X[0] @ X[2] and X[0] @ X[1] > X[1] @ X[2]
