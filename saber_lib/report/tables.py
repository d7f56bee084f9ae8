"""Tables as Markdown and LaTeX, with a caption that names the backends behind the numbers."""
from __future__ import annotations

from pathlib import Path


def cell_text(v, float_fmt: str) -> str:
    """One table cell as text: ``-`` for a missing value or NaN, floats through ``float_fmt``."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return "-" if v != v else float_fmt.format(v)
    return str(v)


def _latex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
        s = s.replace(a, b)
    return s


_TEX = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def _tex(s: str) -> str:
    """Escape every LaTeX special character (one pass, so replacements are not re-escaped)."""
    return "".join(_TEX.get(ch, ch) for ch in s)


def to_markdown(df, caption: str = "", float_fmt: str = "{:.3f}", escape_pipes: bool = False) -> str:
    """A polars DataFrame as a GitHub Markdown table, caption first (``escape_pipes``: a ``|`` inside a
    header or cell is written ``\\|``)."""
    cols = [str(c) for c in df.columns]
    esc = (lambda x: x.replace("|", "\\|")) if escape_pipes else (lambda x: x)
    lines = ["| " + " | ".join(map(esc, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.iter_rows():
        lines.append("| " + " | ".join(esc(cell_text(v, float_fmt)) for v in row) + " |")
    text = "\n".join(lines) + "\n"
    return (f"{caption}\n\n" + text) if caption else text


def to_latex(df, caption: str = "", float_fmt: str = "{:.3f}", *, label: str | None = None, small: bool = False,
             text_columns: int = 1, full_escape: bool = False) -> str:
    """A polars DataFrame as a booktabs LaTeX table with a caption: the first ``text_columns`` columns
    left-aligned, the others right-aligned; ``small``: in ``\\small`` type; ``full_escape``: every LaTeX
    special character escaped (else backslash, ``&``, ``%``, ``_`` and ``#``)."""
    cols = [str(c) for c in df.columns]
    esc = _tex if full_escape else _latex_escape
    spec = ("l" * min(text_columns, len(cols)) + "r" * max(0, len(cols) - text_columns)) if cols else "l"
    out = ["\\begin{table}[t]", "\\centering"] + (["\\small"] if small else [])
    if caption:
        out.append(f"\\caption{{{esc(caption)}}}")
    if label:
        out.append(f"\\label{{{label}}}")
    out += [f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
            " & ".join(esc(c) for c in cols) + " \\\\", "\\midrule"]
    for row in df.iter_rows():
        out.append(" & ".join(esc(cell_text(v, float_fmt)) for v in row) + " \\\\")
    out += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(out) + "\n"


def save_table(df, stem: Path, caption: str, float_fmt: str = "{:.3f}") -> list[Path]:
    """Write ``stem.md`` and ``stem.tex`` for a polars DataFrame."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, tex = stem.with_suffix(".md"), stem.with_suffix(".tex")
    md.write_text(to_markdown(df, caption, float_fmt))
    tex.write_text(to_latex(df, caption, float_fmt))
    return [md, tex]
