"""MkDocs hook (``hooks:`` in mkdocs.yml): every page's ``<!-- saber:... -->`` markers are replaced by
the tables and references generated from the code (``tools/docs_site.py``)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_site  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    return docs_site.expand(markdown)
