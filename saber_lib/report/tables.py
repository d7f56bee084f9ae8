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


def to_markdown(df, caption: str = "", float_fmt: str = "{:.3f}") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.iter_rows():
        lines.append("| " + " | ".join(cell_text(v, float_fmt) for v in row) + " |")
    text = "\n".join(lines) + "\n"
    return (f"{caption}\n\n" + text) if caption else text


def to_latex(df, caption: str = "", float_fmt: str = "{:.3f}") -> str:
    cols = list(df.columns)
    spec = "l" + "r" * (len(cols) - 1)
    out = ["\\begin{table}[t]", "\\centering"]
    if caption:
        out.append(f"\\caption{{{_latex_escape(caption)}}}")
    out += [f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
            " & ".join(_latex_escape(str(c)) for c in cols) + " \\\\", "\\midrule"]
    for row in df.iter_rows():
        out.append(" & ".join(_latex_escape(cell_text(v, float_fmt)) for v in row) + " \\\\")
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
