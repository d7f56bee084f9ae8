"""Fault cases of the embedding store: vector bytes damaged inside the SQLite file (the page still
passes SQLite's checks), and a store written before vectors carried checksums."""
import sqlite3
import warnings

import numpy as np
import pytest

from saber_lib import embed


class CountingEncoder:
    """A stand-in encoder: vector = (length, first letter, 1), calls recorded."""

    name = "counting"
    model_id = "counting-1"
    symmetric = True
    dim = 3

    def __init__(self):
        self.calls: list[list[str]] = []

    def encode(self, texts, kind="document", batch_size=32):
        self.calls.append(list(texts))
        return np.array([[len(t), ord(t[0]), 1.0] for t in texts], dtype=np.float32)


def _rows(path):
    with sqlite3.connect(path) as con:
        return {sha: blob for sha, blob in con.execute("SELECT sha, vec FROM emb")}


def test_damaged_vector_bytes_are_found_named_and_recomputed(tmp_path):
    # old: the damaged vector was returned as a hit, and nDCG changed with exit 0
    enc = CountingEncoder()
    store = embed.EmbeddingStore(tmp_path)
    texts = ["alpha", "beta", "gamma"]
    want = embed.embed(enc, texts, store)
    sha = embed.text_hash("beta")
    blob = bytearray(_rows(store.path)[sha])
    blob[1] ^= 0x40  # a flipped bit inside the first float: same length, a valid SQLite page
    with sqlite3.connect(store.path) as con:
        con.execute("UPDATE emb SET vec = ? WHERE sha = ?", (bytes(blob), sha))
    assert not np.array_equal(np.frombuffer(bytes(blob), dtype=np.float32), want[1])

    fresh = embed.EmbeddingStore(tmp_path)  # another process, a later session
    with pytest.warns(RuntimeWarning, match=rf"embedding store {store.path}: .* text 'beta' is damaged"):
        got = embed.embed(enc, texts, fresh)
    np.testing.assert_array_equal(got, want)
    assert enc.calls[-1] == ["beta"]  # only the damaged one is recomputed
    from saber_lib.embed.store import StoreDamaged
    with pytest.raises(StoreDamaged, match=str(store.path)):
        with sqlite3.connect(store.path) as con:
            con.execute("UPDATE emb SET vec = ? WHERE sha = ?", (bytes(blob), sha))
        fresh.get_many(enc.model_id, "text", [sha])  # without a list of damaged rows: an error

    with pytest.warns(RuntimeWarning, match="'beta' is damaged"):
        embed.embed(enc, ["beta"], fresh)  # recomputed, and repaired in the store
    n = len(enc.calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(embed.embed(enc, texts, fresh), want)
    assert len(enc.calls) == n


def test_a_store_without_checksums_is_migrated_and_never_trusted(tmp_path):
    # old: any row was trusted; a store of the old layout must not be read as verified
    path = tmp_path / "embeddings.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE emb (model_id TEXT NOT NULL, kind TEXT NOT NULL, sha TEXT NOT NULL, "
                    "dim INTEGER NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model_id, kind, sha)) WITHOUT ROWID")
        con.execute("INSERT INTO emb VALUES (?, ?, ?, ?, ?)", ("counting-1", "text", embed.text_hash("delta"), 3,
                                                               np.array([9, 9, 9], dtype=np.float32).tobytes()))
    enc = CountingEncoder()
    store = embed.EmbeddingStore(tmp_path)
    with pytest.warns(RuntimeWarning, match=rf"{path}: 1 counting-1 vectors have no checksum"):
        got = embed.embed(enc, ["delta"], store)
    np.testing.assert_array_equal(got[0], [5, ord("d"), 1])
    assert enc.calls == [["delta"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        embed.embed(enc, ["delta"], embed.EmbeddingStore(tmp_path))
    assert enc.calls == [["delta"]]
