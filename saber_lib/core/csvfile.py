"""The one reader of CSV headers: every CSV file the workbench reads (corpus sources, reference
labels) takes its header row from :func:`csv_header`, so that a header naming a column twice is one
error naming the file and the column, never a row silently read from the last of the two cells.
May import: nothing of ``saber_lib``.
"""
from __future__ import annotations

import csv


class CSVHeaderError(ValueError):
    """A CSV header that cannot be read, or that names a column twice (the message names the file)."""


def csv_header(reader, where) -> list[str] | None:
    """The header row of ``reader`` (a ``csv.reader`` over a file's text, its first row not read yet),
    names stripped of surrounding blanks; None for a file with no rows. Every CSV the workbench reads
    takes its header from here: one that cannot be parsed, or that names a column twice (a row read
    as a dict would silently keep the last of the two cells), raises :class:`CSVHeaderError` naming
    ``where`` (the file and its first line, as the caller writes them, e.g. ``"f.csv, line 1"``) and,
    for a repeat, the column and both positions."""
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise CSVHeaderError(f"{where}: the header cannot be read as CSV ({e})") from None
    if header is None:
        return None
    names = [h.strip() for h in header]
    first: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        if name in first:
            raise CSVHeaderError(f"{where}: the header names column {name!r} twice (columns {first[name]} "
                                 f"and {i}); a column must appear once")
        first[name] = i
    return names
