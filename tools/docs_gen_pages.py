"""mkdocs-gen-files script (mkdocs.yml): the stage notebooks as pages of the site. With
``SABER_DOCS_RUN=runs/NAME`` they are that run's executed notebooks (``runs/NAME/notebooks/``), with
their tables and figures; without it the repository's clean notebooks (code only), and the
notebooks' index page says which. The run's figures are copied beside them for the stage pages."""
import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_site  # noqa: E402

with mkdocs_gen_files.open(docs_site.PIPELINE_PNG, "wb") as f:     # docs/pipeline.md shows it
    f.write(docs_site.pipeline_png())

run = docs_site.docs_run()
rows = []
for stage in docs_site.STAGES:
    executed = run / "notebooks" / stage.notebook if run is not None else None
    source = executed if executed is not None and executed.is_file() else docs_site.ROOT / "notebooks" / stage.notebook
    with mkdocs_gen_files.open(f"notebooks/{stage.notebook}", "wb") as f:
        f.write(source.read_bytes())
    for name, png in docs_site.run_figures(stage.name, run) if run is not None else ():
        with mkdocs_gen_files.open(f"{docs_site.FIGURES_SITE}/{stage.name}/{name}.png", "wb") as f:
            f.write(png.read_bytes())
    shown = f"executed in `{run.name}`" if source == executed else "not executed (code only)"
    rows.append(f"| [{stage.name}]({stage.notebook}) | `{stage.notebook}` | {shown} |")

if run is None:
    origin = (f"This build was not pointed at a run, so the pages below are the repository's notebooks, "
              f"**not executed**: code only, no tables or figures. Build with `{docs_site.RUN_ENV}=runs/demo "
              f"make docs` after `make demo` to see every stage's output.")
else:
    origin = (f"These pages are the executed notebooks of the run `{run.name}` (`{docs_site.RUN_ENV}`); a stage "
              f"that run has not executed is shown as code only.")
with mkdocs_gen_files.open("notebooks/index.md", "w") as f:
    f.write("# Executed notebooks\n\nEach stage is one notebook, run headlessly by papermill with the profile's "
            "parameters injected after its `parameters` cell; `saber run` keeps the executed copy in "
            "`runs/<name>/notebooks/`.\n\n" + origin + "\n\n| stage | notebook | shown |\n|---|---|---|\n"
            + "\n".join(rows) + "\n")
