"""Fault cases of texts that lose content on the way in: a byte-order mark at the start of a JSON-lines
source (its first, valid record was quarantined) and words longer than a WordPiece tokenizer takes
(every such word became one [UNK], so texts made of long words got one and the same vector).

Old behaviour is given per test. Sources are copies of reference files with a mark added; the
encoders are the packaged MiniLM models.
"""
import io
import zipfile

import numpy as np
import pytest

from conftest import DATA_DIR, extra_module, needs_data
from saber_lib.corpus.loaders import load_source

BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------- byte-order mark
def _with_bom(tmp_path, rel: str, zipped_member: str | None = None):
    src = DATA_DIR / rel
    dst = tmp_path / "data" / rel
    dst.parent.mkdir(parents=True)
    if zipped_member is None:
        dst.write_bytes(BOM + src.read_bytes())
    else:
        with zipfile.ZipFile(src) as z:
            payload = z.read(zipped_member)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(zipped_member, BOM + payload)
        dst.write_bytes(buf.getvalue())
    return tmp_path / "data"


@needs_data("sources/olympiadbench/test.jsonl")
def test_a_bom_at_the_start_of_a_jsonl_source_loses_no_record(tmp_path):
    # old: line 1 quarantined, "undecodable line (JSON: Unexpected UTF-8 BOM ...)"
    plain = load_source("olympiadbench", DATA_DIR)
    marked = load_source("olympiadbench", _with_bom(tmp_path, "sources/olympiadbench/test.jsonl"))
    assert marked.raw == plain.raw and len(marked.records) == len(plain.records) > 0
    assert marked.records == plain.records
    assert marked.quarantine == plain.quarantine
    assert not [q for q in marked.quarantine if q["record"] == "line 1"]


@needs_data("sources/harp_proof/HARP_proof-based.jsonl.zip")
def test_a_bom_in_a_zipped_jsonl_source_loses_no_record(tmp_path):
    rel = "sources/harp_proof/HARP_proof-based.jsonl.zip"
    with zipfile.ZipFile(DATA_DIR / rel) as z:
        (member,) = [m for m in z.namelist() if m.endswith(".jsonl") and not m.startswith("__MACOSX")]
    plain = load_source("harp_proof", DATA_DIR, limit=5)
    marked = load_source("harp_proof", _with_bom(tmp_path, rel, member), limit=5)
    assert marked.records == plain.records and marked.quarantine == plain.quarantine
    assert len(marked.records) == 5


def test_a_bad_byte_is_still_quarantined_on_its_line(tmp_path):
    from saber_lib.corpus import readers

    data = BOM + b'{"a": 1}\n{"a": "\xff"}\n'
    got = list(readers._lines(data, "x.jsonl"))
    assert got[0].value == {"a": 1} and got[0].bad is None
    assert got[1].where == "line 2" and got[1].bad.startswith("undecodable line (UTF-8: invalid start byte at byte 7)")


# --------------------------------------------------------------------------- words over 100 characters
def _long_word(seed: int, n: int = 300) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz0123456789"), n))


def test_split_long_words_keeps_short_words_and_cuts_long_ones():
    from saber_lib.embed.models import split_long_words

    short = "Let $x^2 + y^2 = z^2$; prove it. " + "a" * 100
    assert split_long_words(short) is short or split_long_words(short) == short
    w = _long_word(0, 250)
    assert split_long_words(w) == " ".join([w[:100], w[100:200], w[200:]])
    # punctuation ends a word for the tokenizer: a long run of short pieces is not cut
    dotted = ".".join(["abcdefghij"] * 30)
    assert split_long_words(dotted) == dotted
    # the run after the last punctuation mark is counted on its own
    tail = "x" * 60 + "/" + "y" * 150
    assert split_long_words(tail) == "x" * 60 + "/" + "y" * 100 + " " + "y" * 50


@pytest.mark.parametrize("name", ["minilm", "minilm-int8"])
def test_texts_of_one_long_word_each_get_different_vectors(name):
    # old: every word over 100 characters was one [UNK]: both texts had the same vector (cosine 1.0)
    extra_module("sentence_transformers" if name == "minilm" else "onnxruntime", "embed")
    from saber_lib import embed as E

    try:
        enc = E.get_encoder(name)
    except E.EncoderUnavailable as e:
        pytest.skip(str(e))
    a, b = _long_word(1), _long_word(2)
    before = enc.split_texts if hasattr(enc, "split_texts") else 0
    va, vb = E.embed(enc, [a, b], None)
    assert float(va @ vb) < 0.99
    # a text of short words is unchanged by the split, so its vector is the plain model's
    assert enc.prepare("the sum of two squares") == "the sum of two squares"
    assert enc.split_texts - before == 2 and enc.info()["long_words_split"] == enc.split_texts
    from saber_lib.evaluate.stage import _split_note  # and the tables' captions say so

    assert "2 texts with words over 100 characters split" in _split_note({"long_words_split": 2})
    assert _split_note({"long_words_split": 0}) == "" == _split_note({"backend": "bm25s"})


def test_the_tokenizer_sees_no_unknown_word_after_the_split():
    extra_module("tokenizers", "embed")
    from tokenizers import Tokenizer

    from saber_lib.embed.models import split_long_words
    from saber_lib.embed.registry import _minilm_dir

    try:
        tok = Tokenizer.from_file(str(_minilm_dir() / "tokenizer.json"))
    except Exception as e:  # noqa: BLE001 - the package is an optional extra
        pytest.skip(f"MiniLM tokenizer: {e}")
    tok.no_padding()
    tok.no_truncation()
    w = _long_word(3)
    assert tok.encode(w, add_special_tokens=False).tokens == ["[UNK]"]          # what the model saw before
    assert "[UNK]" not in tok.encode(split_long_words(w), add_special_tokens=False).tokens
