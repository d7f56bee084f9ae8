"""A corpus-source plugin: the user's own solved problems from a JSONL file, one object a line with
``id``, ``problem``, ``solution`` and optionally ``subject`` and ``level``.

The file is ``$MY_PROBLEMS_JSONL`` (default: ``problems.jsonl`` beside this module). Load it with
``--set 'run.plugins=[examples.plugins.jsonl_source]'`` and add ``my-problems`` to
``corpus.sources``; the corpus stage hashes the file as an input.
"""
import os
from pathlib import Path

from saber_lib.corpus import register
from saber_lib.corpus.readers import ReadOptions, collect, ident_field, jsonl, make_record, optional_text, text_field

FILE = os.environ.get("MY_PROBLEMS_JSONL") or str(Path(__file__).with_name("problems.jsonl"))


@register("my-problems", (FILE,))
def load_my_problems(data_dir, limit: int = 0, allow_empty: bool = False):
    """Every line of the file as one record (a bad line is quarantined with its reason)."""
    opts = ReadOptions(allow_empty)

    def convert(obj):
        return make_record("my-problems", ident_field(obj, "id"), text_field(obj, "problem"),
                           [text_field(obj, "solution")], optional_text(obj, "subject"), optional_text(obj, "level"))

    return collect("my-problems", jsonl(data_dir, FILE, opts), convert, limit, opts)
