"""Write a clean stage notebook from a list of cells (used when authoring notebooks).

    python tools/new_notebook.py notebooks/99_example.ipynb cells.py

``cells.py`` is plain Python; cells are separated by lines ``# %%`` (code) or ``# %% [markdown]``
(markdown, each line starting with ``# ``). The first code cell is tagged ``parameters``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat


def build(source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    chunks = source.split("\n# %%")
    tagged = False
    for i, chunk in enumerate(chunks):
        if i == 0 and not chunk.startswith("# %%"):
            chunk = chunk.removeprefix("# %%")
        header, _, body = chunk.partition("\n")
        body = body.strip("\n")
        if not body:
            continue
        if "[markdown]" in header:
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
        else:
            cell = nbformat.v4.new_code_cell(body)
            if not tagged:
                cell.metadata["tags"] = ["parameters"]
                tagged = True
            nb.cells.append(cell)
    return nb


if __name__ == "__main__":
    out, src = Path(sys.argv[1]), Path(sys.argv[2])
    nbformat.write(build(src.read_text()), out)
    print(f"wrote {out}")
