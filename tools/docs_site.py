"""What the documentation site generates from the code, so that it cannot drift from it: the parameter
tables of the stage pages (from the profile schema, ``saber_lib.core.config.SCHEMA``, the defaults of
``params/paper.yaml`` with the comment written after each key there as its meaning, and the demo's
values), the command-line reference (from the ``saber`` argument parsers' own help), the stage inputs
(from ``saber_lib.pipeline.stages.STAGES``) and, when the site is built from a run
(``SABER_DOCS_RUN=runs/demo``), the files each stage wrote with their columns.

A page asks for a generated part with a marker on a line of its own, replaced at build time by
``tools/docs_hooks.py``:

    <!-- saber:parameters STAGE -->     the tables of the sections the stage takes
    <!-- saber:section SECTION -->      one section's table
    <!-- saber:inputs STAGE -->         the stages it reads
    <!-- saber:run-outputs STAGE -->    the files of the run the site is built from
    <!-- saber:cli -->                  every subcommand's --help
    <!-- saber:graph -->                the stages and what each reads, as a picture
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from saber_lib.core import config  # noqa: E402
from saber_lib.core.config_types import Any_, Bool, EnvName, Float, Int, List, Map, Spec, Str  # noqa: E402
from saber_lib.pipeline.stages import STAGES  # noqa: E402

MARKER = re.compile(r"^<!-- saber:(parameters|section|inputs|run-outputs|cli|graph)(?: ([\w-]+))? -->$", re.M)
RUN_ENV = "SABER_DOCS_RUN"
STAGE_BY_NAME = {s.name: s for s in STAGES}
# the page that holds a section's table when no stage of that name exists
SECTION_HOME = {"run": "profiles.md", "llm": "llm.md"}


# ----------------------------------------------------------------------------- parameters
@lru_cache(maxsize=1)
def paper_comments() -> dict[tuple[str, str], str]:
    """(section, key) -> the comment written after the key in ``params/paper.yaml`` (with its
    continuation lines: comment-only lines indented past the keys); a key without one gets the comment
    block written just above it, when there is one."""
    out: dict[tuple[str, str], str] = {}
    section, last, block = None, None, []
    for line in (ROOT / "params" / "paper.yaml").read_text().splitlines():
        if m := re.match(r"^(\w+):", line):
            section, last, block = m.group(1), None, []
            continue
        if not line.strip():
            last, block = None, []
            continue
        if m := re.match(r"^  (\w+):(.*)$", line):
            last = (section, m.group(1))
            comment = _comment_of(m.group(2))
            out[last] = comment or " ".join(block)
            block = []
        elif line.lstrip().startswith("#"):
            text = line.strip().lstrip("#").strip()
            if last is not None and len(line) - len(line.lstrip()) > 2 and out.get(last) and not block:
                out[last] += " " + text                     # a continuation of the key's own comment
            else:
                last = None
                block.append(text)
    return out


def _comment_of(rest: str) -> str:
    """The comment of the rest of a YAML line (after ``key:``), outside quotes."""
    quote = None
    for i, ch in enumerate(rest):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[i + 1:].strip()
    return ""


def describe_type(typ) -> str:
    """The value type of a schema entry in words (``integer in [1, 1000]``, ``one of swiss, random``)."""
    def bounds(lo, hi, what):
        if lo is not None and hi is not None:
            return f"{what} in [{lo:g}, {hi:g}]"
        if lo is not None:
            return f"{what} >= {lo:g}"
        return what if hi is None else f"{what} <= {hi:g}"

    if isinstance(typ, Int):
        text = bounds(typ.lo, typ.hi, "integer")
    elif isinstance(typ, Float):
        text = bounds(typ.lo, typ.hi, "number")
    elif isinstance(typ, Spec):
        text = f"{typ.kind} spec"
    elif isinstance(typ, Str):
        text = "one of " + ", ".join(f"`{c}`" for c in typ.choices) if typ.choices else "text"
        if typ.path:
            text += " (a path; relative: inside the " + ("data directory" if typ.path == "data" else "project") + ")"
    elif isinstance(typ, Bool):
        return "true / false"
    elif isinstance(typ, EnvName):
        return "name of an environment variable"
    elif isinstance(typ, List):
        text = f"list of {describe_type(typ.item)}" + (f" (at least {typ.min_len})" if typ.min_len else "")
    elif isinstance(typ, Map):
        text = f"mapping name -> {describe_type(typ.value)}"
    elif isinstance(typ, Any_):
        text = "any value"
    else:
        raise TypeError(f"no description for the schema type {type(typ).__name__}")
    return text + (", or null" if getattr(typ, "nullable", False) else "")


def yaml_value(v) -> str:
    """A value as it is written in a profile (YAML flow style, one line)."""
    text = yaml.safe_dump(v, default_flow_style=True, width=10**6, allow_unicode=True).strip()
    return text[:-len("...")].strip() if text.endswith("...") else text


@lru_cache(maxsize=1)
def profiles() -> tuple[config.Profile, config.Profile]:
    return config.paper_profile(), config.load_profile(ROOT / "params" / "demo.yaml")


def parameter_rows(section: str) -> list[dict]:
    """One row per schema key of ``section``, in schema order: key, paper value (the default), demo
    value, type, meaning."""
    paper, demo = profiles()
    comments = paper_comments()
    return [{"key": key, "paper": paper.values[section][key], "demo": demo.values[section][key],
             "type": describe_type(typ), "meaning": comments.get((section, key), "")}
            for key, typ in config.SCHEMA[section].items()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(v) -> str:
    text = yaml_value(v)
    return "`` " + _cell(text) + " ``" if "`" in text else "`" + _cell(text) + "`"


def parameter_table(section: str) -> str:
    """The Markdown table of one section: key (``section.key``, as ``--set`` takes it), default (the
    paper's value), demo (``same`` when the demo keeps the paper's), type, meaning."""
    lines = ["| key | default (paper) | demo | type | meaning |", "|---|---|---|---|---|"]
    for r in parameter_rows(section):
        demo = "same" if r["demo"] == r["paper"] else _code(r["demo"])
        lines.append(f"| `{section}.{r['key']}` | {_code(r['paper'])} | {demo} | {_cell(r['type'])} | {_cell(r['meaning'])} |")
    return "\n".join(lines)


def section_home(section: str) -> str:
    """The page (relative to docs/) whose table of ``section`` is the full one."""
    return SECTION_HOME.get(section, f"stages/{section}.md")


def stage_parameters(stage: str) -> str:
    """The tables of the sections a stage takes; a section that has its own page is linked to it."""
    out = []
    for sec in STAGE_BY_NAME[stage].sections:
        if section_home(sec) == f"stages/{stage}.md":
            out.append(parameter_table(sec))
        else:
            target = "../" + section_home(sec)
            out.append(f"It also takes the section `{sec}` ({len(config.SCHEMA[sec])} keys, table on "
                       f"[its page]({target})).")
    out.append("Every stage also gets the `run` keys (seed, data, cache and figures folders, threads: "
               "[Profiles and parameters](../profiles.md)).")
    return "\n\n".join(out)


def stage_inputs(stage: str) -> str:
    s = STAGE_BY_NAME[stage]
    reads = ", ".join(f"[{d}]({d}.md)" for d in s.declared_inputs()) or "no other stage"
    text = f"Notebook `notebooks/{s.notebook}`; reads {reads}."
    if s.resumable:
        text += " Resumable: a killed run picks up from its stored rounds and the LLM cache."
    if s.parallel:
        text += " Its loops run on the profile's executor (`run.executor`: local processes or Dask)."
    return text


# ----------------------------------------------------------------------------- a run's files
def docs_run() -> Path | None:
    """The run directory the site is built from (``SABER_DOCS_RUN``), or None."""
    value = os.environ.get(RUN_ENV)
    if not value:
        return None
    path = Path(value)
    path = path if path.is_absolute() else ROOT / path
    if not path.is_dir():
        raise FileNotFoundError(f"{RUN_ENV}={value}: no such run directory")
    return path


def run_outputs(stage: str, run: Path | None = None) -> str:
    """The files the stage wrote in the run the site is built from, with the columns of each table."""
    run = docs_run() if run is None else run
    if run is None:
        return (f"*This site was built without a run (set `{RUN_ENV}=runs/demo` before `make docs` to list "
                "the files of a run here, with their columns).*")
    manifest = run / stage / "manifest.json"
    if not manifest.is_file():
        return f"*The run `{run.name}` has no finished `{stage}` stage.*"
    data = json.loads(manifest.read_text())
    lines = [f"Files of the run `{run.name}` (`{stage}/`):", "", "| file | size | columns |", "|---|---|---|"]
    groups: dict[str, list] = {}      # a folder of files (a tournament's rounds) is one row
    for name, meta in sorted(data.get("outputs", {}).items()):
        top = name.split("/")[0] + "/" if "/" in name else name
        groups.setdefault(top, []).append((name, meta))
    for top, members in groups.items():
        size = sum(meta.get("size", 0) for _, meta in members)
        what = f"`{top}` ({len(members)} files)" if top.endswith("/") else f"`{top}`"
        lines.append(f"| {what} | {size:,} B | {_cell(_columns(run / stage / members[0][0]))} |")
    for name, _ in run_figures(stage, run):
        lines += ["", f"![{name}](../{FIGURES_SITE}/{stage}/{name}.png)", f"*Figure `{name}` of the run `{run.name}`.*"]
    return "\n".join(lines)


FIGURES_SITE = "run-figures"    # where the site keeps the figures of the run it is built from


def run_figures(stage: str, run: Path) -> list[tuple[str, Path]]:
    """(name, PNG file) of every figure the stage drew in the run, as its manifest records them."""
    manifest = run / stage / "manifest.json"
    if not manifest.is_file():
        return []
    recorded = json.loads(manifest.read_text()).get("figure_outputs", {})
    return sorted((Path(f).stem, Path(f)) for f in recorded if str(f).endswith(".png") and Path(f).is_file())


def _columns(path: Path) -> str:
    if path.suffix != ".parquet":
        return ""
    return ", ".join(f"`{n}`" for n in pl.read_parquet_schema(path))


# ----------------------------------------------------------------------------- command line
def _help_of(args: list[str]) -> str:
    from saber_lib.pipeline import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.main(args)
    return out.getvalue().rstrip()


def subcommands() -> list[str]:
    """The subcommands of ``saber``, in the order its parser declares them."""
    import argparse

    from saber_lib.pipeline import cli
    actions = [a for a in cli.command_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(actions[0].choices) if actions else []


def cli_reference() -> str:
    """``saber --help`` and every subcommand's ``--help``, as the parsers print them."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parts = ["```text\n$ saber --help\n" + _help_of(["--help"]) + "\n```"]
        for sub in subcommands():
            parts.append(f"## saber {sub}\n\n```text\n$ saber {sub} --help\n" + _help_of([sub, "--help"]) + "\n```")
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n\n".join(parts)


def pipeline_edges() -> list[tuple[str, str]]:
    """(stage read, stage reading it) for every stage and every stage it may read."""
    return [(d, s.name) for s in STAGES for d in s.declared_inputs()]


PIPELINE_PNG = "pipeline.png"


def pipeline_png() -> bytes:
    """The stages as a picture (PNG): a column per step of the dependency order, and an arrow from a
    stage to each stage that reads it directly, not through another one (the transitive reduction of
    :func:`pipeline_edges`). Drawn with networkx and matplotlib, so the site needs no script from the
    network to show it."""
    import matplotlib   # only when the site is built
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    graph = nx.DiGraph(pipeline_edges())
    graph.add_nodes_from(s.name for s in STAGES)
    order = {s.name: i for i, s in enumerate(STAGES)}
    column = {name: x for x, layer in enumerate(nx.topological_generations(graph)) for name in layer}
    for name in column:          # a stage that reads nothing stands just before its first reader
        if graph.in_degree(name) == 0 and graph.out_degree(name):
            column[name] = min(column[b] for b in graph.successors(name)) - 1
    pos = {}
    for x in sorted(set(column.values())):
        layer = sorted((n for n in column if column[n] == x), key=order.get)
        for i, name in enumerate(layer):
            pos[name] = (x * 2.2, ((len(layer) - 1) / 2 - i) * 1.3)
    fig, ax = plt.subplots(figsize=(15, 5.5), dpi=110)
    for a, b in nx.transitive_reduction(graph).edges:
        ax.annotate("", xy=pos[b], xytext=pos[a], zorder=1,
                    arrowprops=dict(arrowstyle="-|>", color="#8a8fa3", lw=0.9, shrinkA=30, shrinkB=30,
                                    connectionstyle="arc3,rad=0.08"))
    for name, (x, y) in pos.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=10, zorder=2,
                bbox=dict(boxstyle="round,pad=0.45", fc="#e8eaf6", ec="#3f51b5", lw=1.0))
    xs, ys = zip(*pos.values())
    ax.set_xlim(min(xs) - 1.1, max(xs) + 1.1)
    ax.set_ylim(min(ys) - 0.7, max(ys) + 0.7)
    ax.axis("off")
    out = io.BytesIO()
    fig.savefig(out, format="png", bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()


def pipeline_graph() -> str:
    """The Markdown that shows the picture (written into the site by ``tools/docs_gen_pages.py``)."""
    return (f"![The stages, an arrow from each to the stages that read it]({PIPELINE_PNG})\n\n"
            "*An arrow from a stage to each stage that reads it directly; a stage may also read what the "
            "stages before it read (the stage pages list every input).*")


# ----------------------------------------------------------------------------- markers
def expand(markdown: str) -> str:
    """A page's Markdown with every ``<!-- saber:... -->`` marker replaced by what it asks for."""
    def one(m):
        what, arg = m.group(1), m.group(2)
        if what == "parameters":
            return stage_parameters(arg)
        if what == "section":
            return parameter_table(arg)
        if what == "inputs":
            return stage_inputs(arg)
        if what == "run-outputs":
            return run_outputs(arg)
        if what == "graph":
            return pipeline_graph()
        return cli_reference()
    return MARKER.sub(one, markdown)
