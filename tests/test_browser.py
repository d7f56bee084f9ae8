"""The interactive parts in a real browser: JupyterLab + Chromium driven by Playwright.

A tiny-profile run (``runs/ui-tiny``, or ``$SABER_BROWSER_RUN_DIR``; a missing one starts as a copy of
the session's tiny run up to the tournament, and stages already up to date are skipped) gives the data. JupyterLab is started on a
free loopback port with a random token, serving a temporary folder with the two stage notebooks
parameterized for that run (papermill's ``parameterize_notebook``, not executed). Chromium (Debian's
``chromium``; Playwright's own browser download is not used) opens each notebook, runs all cells,
and works the widgets: the threshold explorer's slider (the table and the plot change; the
in-browser slider-to-image latency is printed) and its Save button (a valid profile), and the
annotation tool's keyboard (three labels, checked in the store). Screenshots go to
``figures/<run>/ui_explorer.png`` and ``ui_annotation.png``.

Skipped, with the reason, when playwright or Chromium is missing (a failure under ``CI=true``);
``make test-browser`` and CI (``.ci/run``) install both.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import polars as pl
import pytest

from conftest import copy_run, needs
from saber_lib.core import config
from saber_lib.validation.annotate_ui import AnnotationStore
from saber_lib.pipeline import cli, runner
from saber_lib.pipeline.stages import BY_NAME

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("SABER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ANNOTATOR = "browser-test"
WAIT_MS = 120_000            # every wait in the page is bounded

pytestmark = pytest.mark.browser

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # optional: the `browser` extra
    sync_playwright = None

# skipped with the reason when either is missing; a failure under CI (CI=true: .ci/run installs both)
MISSING = ([] if sync_playwright else ["playwright (pip install -e '.[browser]')"]) + \
    ([] if Path(CHROMIUM).exists() else [f"Chromium at {CHROMIUM} (apt-get install chromium, or set SABER_CHROMIUM)"])
pytestmark = [pytest.mark.browser, needs(not MISSING, " and ".join(MISSING) + " for the browser tests "
                                                       "(`make test-browser` installs both)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_run(request):
    run_dir = Path(os.environ.get("SABER_BROWSER_RUN_DIR", ROOT / "runs" / "ui-tiny")).resolve()
    profile = ROOT / "params" / "tiny.yaml"
    if not run_dir.exists():              # a first session starts from the session's tiny run (conftest)
        copy_run(request.getfixturevalue("tiny_tournament_run")[0], run_dir)
    runner.run(profile, ["thresholds", "judge_validation"], run_dir=run_dir, log=print)
    ctx = runner.RunContext(config.load_profile(profile), run_dir)
    figures = Path(ctx.resolve(ctx.profile.values["run"]["figures_dir"])) / ctx.run_name
    figures.mkdir(parents=True, exist_ok=True)
    return ctx, figures


@pytest.fixture(scope="module")
def lab(tiny_run, tmp_path_factory):
    """JupyterLab on 127.0.0.1:<free port> with a token, serving a folder of parameterized notebooks."""
    ctx, _ = tiny_run
    root = tmp_path_factory.mktemp("lab")
    # the notebooks work on a copy of the run (same name), so the run's artifacts and manifests stay as
    # they are; their figures go to the scratch folder, the screenshots to the run's figures folder
    scratch = runner.RunContext(ctx.profile, root / "runs" / ctx.run_name)
    shutil.copytree(ctx.run_dir, scratch.run_dir)
    fast = {"jv_schedules": ["swiss"]}      # the annotation tool does not need the other schedules' tournaments
    for stage, extra in (("thresholds", {}), ("judge_validation", {"jv_annotator": ANNOTATOR, **fast})):
        st = BY_NAME[stage]
        import papermill.iorw  # heavy: only this test needs papermill's parameterizer
        import papermill.parameterize

        nb = papermill.iorw.load_notebook_node(str(ROOT / "notebooks" / st.notebook))

        params = {**runner.stage_parameters(scratch, st), **extra, "figures_dir": str(root / "figures")}
        nbformat.write(papermill.parameterize.parameterize_notebook(nb, params, kernel_name="python3"), root / st.notebook)
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings"), "JUPYTERLAB_WORKSPACES_DIR": str(root / ".ws"),
           "JUPYTER_RUNTIME_DIR": str(root / ".runtime"), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    news = root / ".settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false", "checkForUpdates": false}')      # no pop-up over the widgets
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start: {(root / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", token, root, scratch.run_dir
    finally:                               # always stop the server (and its kernels)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


def _open_and_run_all(browser, lab, notebook: str, widget_css: str):
    url, token, root, _ = lab
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}", timeout=WAIT_MS)   # reset: no restored tabs
    # the notebook's panel is the current widget and its kernel is there
    ready = ("(path) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
             " return !!(w && w.context && w.context.path === path && w.sessionContext"
             " && w.sessionContext.session && w.sessionContext.session.kernel); }")
    page.wait_for_function(ready, arg=notebook, timeout=WAIT_MS)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    try:
        page.locator(widget_css).wait_for(state="visible", timeout=WAIT_MS)
    except Exception:
        page.screenshot(path=str(root / f"{notebook}.failed.png"), full_page=True)
        errs = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        raise AssertionError(f"{notebook}: no {widget_css} after {WAIT_MS / 1000:.0f} s (screenshot in {root}); "
                             f"stderr outputs: {[errs.nth(k).inner_text()[-500:] for k in range(errs.count())]}")
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']", has_text="Error")
    assert errors.count() == 0, errors.first.inner_text()
    return page


def _box(loc) -> dict:
    box = loc.bounding_box()
    assert box is not None, f"{loc} is not displayed"
    return box


def _on_screen(page, *locs):
    """Each element is displayed and lies wholly inside the browser window (nothing to scroll to)."""
    view = page.viewport_size
    for loc in locs:
        assert loc.is_visible(), f"{loc} is hidden"
        b = _box(loc)
        assert b["width"] > 0 and b["height"] > 0, f"{loc} has no size"
        assert b["x"] >= 0 and b["y"] >= 0 and b["x"] + b["width"] <= view["width"] + 1 \
            and b["y"] + b["height"] <= view["height"] + 1, f"{loc} lies outside the window: {b}"


def _scroll_to_top_of(page, loc):
    loc.evaluate("(el) => el.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)


def test_threshold_explorer_in_the_browser(tiny_run, lab, browser, tmp_path):
    ctx, figures = tiny_run
    page = _open_and_run_all(browser, lab, BY_NAME["thresholds"].notebook, ".saber-threshold-explorer")
    ex = page.locator(".saber-threshold-explorer")
    img = ex.locator("img.saber-explorer-plot")
    table = ex.locator(".saber-explorer-table")
    page.wait_for_function("(el) => el.src && el.naturalWidth > 0", arg=img.element_handle(), timeout=WAIT_MS)
    domains = list(config.DOMAINS)
    # what a person sees: the heat maps of every domain and the frontier (the caption names the panels
    # drawn), the read-out of the point and one table row per domain
    caption = ex.locator(".saber-explorer-caption").inner_text()
    assert all(d in caption for d in domains) and "feasible frontier" in caption, caption
    natural = img.evaluate("(el) => [el.naturalWidth, el.naturalHeight]")
    assert natural[0] > 3 * natural[1] and _box(img)["width"] >= 0.9 * min(natural[0], _box(ex)["width"])
    readout = ex.locator(".saber-readout").inner_text()
    assert readout.startswith("tau_topic = ") and all(f"{d} " in readout for d in domains), readout
    rows = table.locator("tbody tr")
    assert sorted(rows.nth(k).locator("td").first.inner_text() for k in range(rows.count())) == sorted(domains)
    handle = ex.locator(".noUi-handle").first          # tau_topic
    handle.focus()
    lat = []
    for _ in range(6):
        src, text = img.get_attribute("src"), table.inner_text()
        t0 = time.perf_counter()
        handle.press("ArrowRight")
        page.wait_for_function("([el, s]) => el.src !== s && el.naturalWidth > 0", arg=[img.element_handle(), src],
                               timeout=WAIT_MS)
        lat.append((time.perf_counter() - t0) * 1000)
    first_text = text
    for _ in range(10):                                  # move on until the table changes too
        if table.inner_text() != first_text:
            break
        handle.press("ArrowRight")
        page.wait_for_timeout(300)
    assert table.inner_text() != first_text
    print(f"\nbrowser slider-to-image latency: median {statistics.median(lat):.0f} ms, max {max(lat):.0f} ms "
          f"({len(lat)} moves)")
    # save the point as a profile override, into a temporary folder
    ex.locator(".widget-text", has_text="folder").locator("input").fill(str(tmp_path))
    ex.locator(".widget-text", has_text="profile name").locator("input").fill("ui-picked")
    ex.locator(".widget-text", has_text="profile name").locator("input").press("Enter")
    ex.get_by_role("button", name="Save as profile").click()
    ex.locator(".saber-profile-path").wait_for(timeout=WAIT_MS)
    _scroll_to_top_of(page, ex)
    ex.screenshot(path=str(figures / "ui_explorer.png"))
    written = tmp_path / "ui-picked.yaml"
    assert ex.locator(".saber-profile-path").inner_text() == str(written)
    assert cli.main(["validate", str(written)]) == 0
    th = config.load_profile(written).values["thresholds"]
    assert th["threshold_rule"] == "fixed" and th["tau_topic"] is not None and th["tau_summ"] is not None
    # the written profile holds the point the read-out shows
    readout = ex.locator(".saber-readout").inner_text()
    assert f"tau_topic = {th['tau_topic']:.3f}, tau_summ = {th['tau_summ']:.3f}, K = {th['K']}" in readout, readout
    _on_screen(page, img, ex.locator(".noUi-handle").first)
    page.close()


def test_annotation_tool_in_the_browser(tiny_run, lab, browser):
    ctx, figures = tiny_run
    run_dir = lab[3]
    assert not (run_dir / "annotations" / f"{ANNOTATOR}.jsonl").exists()
    page = _open_and_run_all(browser, lab, BY_NAME["judge_validation"].notebook, ".saber-annotation-tool")
    tool = page.locator(".saber-annotation-tool")
    tool.locator("mjx-container").first.wait_for(timeout=WAIT_MS)        # MathJax typeset the LaTeX
    total = ctx.profile.values["judge_validation"]["jv_pairs"]
    tool.locator(".saber-keys input").click()
    for n, key in enumerate(["1", "2", "t"], 1):
        page.keyboard.press(key)
        tool.locator(".saber-progress", has_text=f"{n} / {total} tasks finished").wait_for(timeout=WAIT_MS)
    tool.locator("mjx-container").first.wait_for(timeout=WAIT_MS)
    _scroll_to_top_of(page, tool)
    tool.screenshot(path=str(figures / "ui_annotation.png"))
    # what a person sees on the fourth task: the progress line, the query, both candidates side by side
    # in equal columns with their maths typeset, the buttons and the key box with its hints, all on screen
    pairs = pl.read_parquet(run_dir / "judge_validation" / "pairs.parquet").sort("task_id")
    progress, query = tool.locator(".saber-progress"), tool.locator(".saber-query")
    cand1, cand2 = tool.locator(".saber-candidate-1"), tool.locator(".saber-candidate-2")
    keys, hints = tool.locator(".saber-keys input"), tool.locator(".saber-key-help")
    save = tool.get_by_role("button", name="Save", exact=True)
    _on_screen(page, progress, query, cand1, cand2, save, keys, hints)
    assert progress.inner_text().startswith(f"3 / {total} tasks finished")
    listed = tool.locator("select").evaluate("(el) => [el.selectedIndex, el.options[el.selectedIndex].text]")
    assert listed == [3, f"·\xa0task\xa0{pairs['task_id'][3]}"], listed     # the list marks the task shown
    assert hints.inner_text() == "keys (click the box first): 1 Candidate 1, 2 Candidate 2, t Tie, s skip"
    b1, b2, whole = _box(cand1), _box(cand2), _box(tool)
    assert abs(b1["y"] - b2["y"]) <= 1 and b1["x"] + b1["width"] <= b2["x"] + 1       # side by side
    assert abs(b1["width"] - b2["width"]) <= 2 and b1["width"] >= 0.3 * whole["width"]
    corpus = pl.read_parquet(run_dir / "corpus" / "corpus.parquet")
    shown = pairs.row(3, named=True)
    has_math = []
    for pane, heading, doc in ((query, "Target problem", shown["query_id"]), (cand1, "Candidate 1", shown["a"]),
                               (cand2, "Candidate 2", shown["b"])):
        row = corpus.filter(pl.col("doc_id") == doc).row(0, named=True)
        text = pane.inner_text()
        word = next(w for w in row["problem"].split() if w.isalpha() and len(w) > 3)
        assert text.startswith(heading) and word in text, (heading, word)          # the task's own text
        if "$" in row["problem"] + row["solution"]:
            has_math.append(doc)
            assert pane.locator("mjx-container").count() > 0, f"{heading}: LaTeX not typeset"
    assert has_math, "no text of this task has maths: the rendering check checked nothing"
    page.close()
    recs = AnnotationStore.for_run(run_dir, ANNOTATOR).records()
    by_pair = {r["pair_id"]: r["label"] for r in recs}
    assert [by_pair.get(p) for p in pairs["pair_id"][:3]] == ["a", "b", "tie"]
    assert len(recs) == 3
