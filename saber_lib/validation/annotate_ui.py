"""Human annotation of candidate pairs (paper App. C.1): a JSON-lines store and an ipywidgets tool.

The store keeps one file per annotator, ``<run_dir>/annotations/<annotator>.jsonl``, outside every
stage folder so that rerunning a stage never deletes human work. Each line is one judgment::

    {"pair_id": ..., "query_id": ..., "a": <cand shown first>, "b": <cand shown second>,
     "label": "a" | "b" | "tie", "annotator": ..., "saved_at": <ISO time>}

Every change rewrites the file through a temporary file and ``os.replace`` (atomic: a crash leaves
the old or the new file, never half of one). A judgment is keyed by ``pair_id`` (query + unordered
candidate pair), so it survives a different display order: :meth:`AnnotationStore.labels_for`
flips ``a``/``b`` when a task shows the pair the other way round.

The tool (:class:`AnnotationTool`) shows the query and the two candidates side by side (equal columns whose
texts scroll inside boxes of fixed height, so the whole tool fits on one screen) with
rendered math (``ipywidgets.HTMLMath``: JupyterLab's MathJax typesets ``$...$``, ``\\(...\\)``,
``\\[...\\]``), buttons Candidate 1 / Candidate 2 / Tie, Save, and Remove judgment (asks for
confirmation); finished tasks are marked in the task list. Progress shows done / total for every
annotator of the run; it opens after the annotator's most recent judgment (resume).

Keyboard: ipywidgets has no global key events, so the tool has a key box (a text input, its typed
text drawn transparent): with it focused, ``1`` saves Candidate 1, ``2`` Candidate 2, ``t`` Tie (each then
moves to the next open task), ``s`` skips to the next open task. The box only grows (the kernel
never clears it, which could race with keys typed meanwhile); each change handles the characters
appended since the last one. With ``judge_labels`` the tool reports, after every ``every`` labels,
the agreement of this annotator with the judge (1 same label, 0.5 one tie, 0 opposite).
"""
from __future__ import annotations

import html
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from ..core.data import atomic_write, read_text

LABELS = ("a", "b", "tie")
KEYS = {"1": "a", "2": "b", "t": "tie", "s": "skip"}
# The texts scroll inside boxes of fixed height, so that however long a candidate's solution is, the
# progress line, the query, both candidates side by side, the buttons and the key box fit on one screen.
QUERY_HEIGHT = "150px"
CANDIDATE_HEIGHT = "380px"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class AnnotationStore:
    """One annotator's judgments in ``<directory>/<annotator>.jsonl``."""

    def __init__(self, directory, annotator: str):
        if not _NAME_RE.match(annotator or ""):
            raise ValueError(f"annotator name {annotator!r}: use letters, digits, '_', '-', '.'")
        self.annotator = annotator
        self.path = Path(directory) / f"{annotator}.jsonl"
        self._records: dict[str, dict] = self._read()

    @classmethod
    def for_run(cls, run_dir, annotator: str) -> "AnnotationStore":
        return cls(Path(run_dir) / "annotations", annotator)

    def _read(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        if not self.path.exists():
            return out
        for n, line in enumerate(read_text(self.path).splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{self.path} line {n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or rec.get("label") not in LABELS or not rec.get("pair_id"):
                raise ValueError(f"{self.path} line {n}: needs a pair_id and a label in {LABELS}")
            out[rec["pair_id"]] = rec
        return out

    def _write(self) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "w") as f:
                for pid in sorted(self._records):
                    f.write(json.dumps(self._records[pid], sort_keys=True, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())

        atomic_write(self.path, write)   # a failed write leaves the old file and no temporary one

    # --- queries
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, pair_id: str) -> bool:
        return pair_id in self._records

    def get(self, pair_id: str) -> dict | None:
        return self._records.get(pair_id)

    def records(self) -> list[dict]:
        return [dict(self._records[k]) for k in sorted(self._records)]

    def labels_for(self, tasks: pl.DataFrame) -> list[str | None]:
        """Label of each task row (``pair_id``, ``a``, ``b``) in the task's display order; None if unlabelled."""
        out = []
        for pid, a, b in tasks.select("pair_id", "a", "b").iter_rows():
            rec = self._records.get(pid)
            if rec is None:
                out.append(None)
            elif rec["label"] == "tie" or (rec["a"], rec["b"]) == (a, b):
                out.append(rec["label"])
            elif (rec["a"], rec["b"]) == (b, a):
                out.append("b" if rec["label"] == "a" else "a")
            else:
                raise ValueError(f"{self.path}: pair {pid} holds candidates {rec['a']}, {rec['b']}, the task {a}, {b}")
        return out

    # --- changes (each one written atomically)
    def save(self, pair_id: str, query_id: str, a: str, b: str, label: str) -> dict:
        if label not in LABELS:
            raise ValueError(f"label {label!r} is not one of {LABELS}")
        rec = {"pair_id": pair_id, "query_id": query_id, "a": a, "b": b, "label": label,
               "annotator": self.annotator, "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        self._change(pair_id, rec)
        return rec

    def remove(self, pair_id: str) -> bool:
        if pair_id not in self._records:
            return False
        self._change(pair_id, None)
        return True

    def _change(self, pair_id: str, rec: dict | None) -> None:
        """Set (or, with None, drop) one record and rewrite the file; when the write fails the
        store keeps what the file holds."""
        old = dict(self._records)
        if rec is None:
            del self._records[pair_id]
        else:
            self._records[pair_id] = rec
        try:
            self._write()
        except BaseException:
            self._records = old
            raise


def load_annotations(run_dir) -> dict[str, AnnotationStore]:
    """Every annotator's store found in ``<run_dir>/annotations/`` (name -> store)."""
    d = Path(run_dir) / "annotations"
    if not d.exists():
        return {}
    return {p.stem: AnnotationStore(d, p.stem) for p in sorted(d.glob("*.jsonl"))}


# ----------------------------------------------------------------------------- the widget
def _as_html(title: str, text: str) -> str:
    """Text for HTMLMath: HTML-escaped (MathJax still sees the $...$), newlines kept."""
    body = html.escape(text or "").replace("\n", "<br>")
    return f"<h4 style='margin:4px 0'>{html.escape(title)}</h4><div style='white-space:normal'>{body}</div>"


class AnnotationTool:
    """The annotation widget. ``tasks``: rows with ``task_id, pair_id, query_id, a, b``;
    ``texts``: id -> problem (+ solution) text. ``tool.widget`` is what the notebook displays."""

    def __init__(self, tasks: pl.DataFrame, texts: dict[str, str], store: AnnotationStore, *,
                 judge_labels=None, judge_name: str = "the judge", agreement=None, every: int = 10):
        import ipywidgets as widgets  # optional: only the interactive annotation tool needs it

        self.tasks = tasks.sort("task_id")
        self.rows = self.tasks.to_dicts()
        missing = sorted({r[k] for r in self.rows for k in ("query_id", "a", "b")} - set(texts))
        if missing:
            raise ValueError(f"no text for {len(missing)} ids, e.g. {missing[:3]}")
        self.texts, self.store = texts, store
        # judge_labels: pair_id -> the judge's label in the task's display order; agreement(x, y) -> float
        self.judge_labels = [judge_labels.get(r["pair_id"]) for r in self.rows] if judge_labels is not None else None
        self.judge_name, self.agreement_fn, self.every = judge_name, agreement, int(every)
        self.key_log: list[str] = []        # keys handled, in order (for tests and the status line)
        self._keys_seen = ""
        self.choice: str | None = None
        self._quiet = False                 # set while the tool itself moves the list or the buttons
        self._confirming = False
        self.task_list = widgets.Select(options=self._options(), rows=12, layout=widgets.Layout(width="120px", min_width="120px"))

        def pane(css: str, **size):
            box = widgets.HTMLMath(layout=widgets.Layout(border="1px solid #bbb", padding="6px", overflow="auto",
                                                         min_width="0", **size))
            box.add_class(css)
            return box

        self.query = pane("saber-query", max_height=QUERY_HEIGHT)
        # two equal columns (flex 1 1 0: their width never depends on how long the texts are)
        self.cand1 = pane("saber-candidate-1", flex="1 1 0", height=CANDIDATE_HEIGHT, margin="0 4px 0 0")
        self.cand2 = pane("saber-candidate-2", flex="1 1 0", height=CANDIDATE_HEIGHT, margin="0 0 0 4px")
        self.b1 = widgets.ToggleButton(description="Candidate 1")
        self.b2 = widgets.ToggleButton(description="Candidate 2")
        self.btie = widgets.ToggleButton(description="Tie")
        self.bsave = widgets.Button(description="Save", button_style="primary")
        self.bremove = widgets.Button(description="Remove judgment", button_style="danger")
        self.status = widgets.HTML()
        self.progress = widgets.HTML()
        self.agreement = widgets.HTML()
        self.keys = widgets.Text(value="", continuous_update=True, layout=widgets.Layout(width="200px"),
                                 placeholder="click here for keys", style={"text_color": "transparent"})
        self.keys.add_class("saber-keys")
        self.keys.observe(self._on_keys, names="value")
        key_help = widgets.HTML("<span class='saber-key-help'>keys (click the box first): <b>1</b> Candidate 1, "
                                "<b>2</b> Candidate 2, <b>t</b> Tie, <b>s</b> skip</span>")
        for btn, lab in ((self.b1, "a"), (self.b2, "b"), (self.btie, "tie")):
            btn.observe(lambda ch, lab=lab: self._on_choice(lab, ch), names="value")
        self.bsave.on_click(lambda _: self.save())
        self.bremove.on_click(lambda _: self.remove())
        self.task_list.observe(self._on_task, names="value")
        controls = widgets.HBox([self.b1, self.b2, self.btie, self.bsave, self.bremove])
        pair = widgets.HBox([self.cand1, self.cand2], layout=widgets.Layout(width="100%"))
        right = widgets.VBox([self.query, pair, controls, widgets.HBox([self.keys, key_help]), self.status,
                              self.agreement], layout=widgets.Layout(flex="1 1 0", min_width="0"))
        tasks = widgets.VBox([widgets.HTML("<b>Tasks</b>"), self.task_list], layout=widgets.Layout(flex="0 0 auto"))
        self.widget = widgets.VBox([self.progress, widgets.HBox([tasks, right], layout=widgets.Layout(width="100%"))])
        self.widget.add_class("saber-annotation-tool")
        self.current = -1
        if self.rows:
            first_open = self.resume_index()
            self.task_list.value = first_open
            self.show(first_open)
        self._report_agreement(force=True)

    # --- state
    def _options(self):
        out = []
        for k, r in enumerate(self.rows):
            done = r["pair_id"] in self.store
            out.append((f"{'✓' if done else '·'} task {r['task_id']}", k))
        return out

    def resume_index(self) -> int:
        """The first open task after the annotator's most recent judgment (wrapping round); 0 if all done."""
        pos = {r["pair_id"]: k for k, r in enumerate(self.rows)}
        saved = [(rec["saved_at"], pos[rec["pair_id"]]) for rec in self.store.records() if rec["pair_id"] in pos]
        start = max(saved)[1] + 1 if saved else 0
        n = len(self.rows)
        return next(((start + d) % n for d in range(n) if self.rows[(start + d) % n]["pair_id"] not in self.store), 0)

    def progress_counts(self) -> dict[str, int]:
        """annotator -> tasks of this list they finished (this annotator first, then the run's others)."""
        out = {self.store.annotator: sum(r["pair_id"] in self.store for r in self.rows)}
        for p in sorted(self.store.path.parent.glob("*.jsonl")):
            if p.stem not in out:
                try:
                    other = AnnotationStore(p.parent, p.stem)
                except ValueError:
                    continue
                out[p.stem] = sum(r["pair_id"] in other for r in self.rows)
        return out

    def _refresh(self):
        cur = self.current
        # (no unobserve_all here: it would also drop the widget's own value -> index link, and the
        # browser would keep showing the first task selected)
        quiet, self._quiet = self._quiet, True
        try:
            self.task_list.options = self._options()
            self.task_list.value = cur
        finally:
            self._quiet = quiet
        counts = self.progress_counts()
        me = self.store.annotator
        others = "".join(f" · {html.escape(a)}: {n} / {len(self.rows)}" for a, n in counts.items() if a != me)
        self.progress.value = (f"<span class='saber-progress'><b>{counts[me]}</b> / {len(self.rows)} tasks finished "
                               f"(annotator {html.escape(me)}){others}</span>")

    def _report_agreement(self, force: bool = False):
        """After every ``every`` labels (or ``force``): agreement with the judge over the labelled tasks."""
        if self.judge_labels is None or self.agreement_fn is None:
            return None
        mine = self.store.labels_for(self.tasks)
        n = sum(x is not None for x in mine)
        if n == 0 or (n % self.every and not force) or (force and n < self.every):
            return None
        x = self.agreement_fn(mine, self.judge_labels)
        both = sum(a is not None and b in LABELS for a, b in zip(mine, self.judge_labels))
        self.agreement.value = (f"<span class='saber-agreement'>after {n} labels: agreement with "
                                f"{html.escape(self.judge_name)} <b>{x:.2f}</b> on {both} pairs "
                                f"(1 same label, 0.5 one tie, 0 opposite)</span>")
        return x

    # --- keyboard
    def _on_keys(self, change):
        new, old = change["new"] or "", self._keys_seen
        self._keys_seen = new
        if not new.startswith(old):      # edited (backspace, paste over): nothing to handle
            return
        for ch in new[len(old):]:
            self.key(ch)

    def key(self, ch: str):
        """Handle one key: 1 / 2 / t save a label (and move on), s skips; others are ignored."""
        act = KEYS.get(ch.lower())
        if act is None or not self.rows:
            return None
        self.key_log.append(ch.lower())
        if act == "skip":
            left = self.rows[self.current]["task_id"]
            nxt = self._next_open(self.current)
            if nxt is not None:
                self.task_list.value = nxt
            self.status.value = f"skipped task {left}" + ("" if nxt is not None else " (no other open task)")
            return None
        self.select(act)
        return self.save()

    def _next_open(self, k: int):
        n = len(self.rows)
        return next(((k + d) % n for d in range(1, n) if self.rows[(k + d) % n]["pair_id"] not in self.store), None)

    def finished(self) -> list[int]:
        """task_ids with a saved judgment."""
        return [r["task_id"] for r in self.rows if r["pair_id"] in self.store]

    def show(self, k: int):
        if k is None:
            return
        self.current = k
        r = self.rows[k]
        self._confirming = False
        self.bremove.description = "Remove judgment"
        self.query.value = _as_html("Target problem", self.texts[r["query_id"]])
        self.cand1.value = _as_html("Candidate 1", self.texts[r["a"]])
        self.cand2.value = _as_html("Candidate 2", self.texts[r["b"]])
        saved = self.store.labels_for(self.tasks.filter(pl.col("pair_id") == r["pair_id"]))[0]
        self._set_choice(saved)
        self.status.value = f"saved: <b>{ {'a': 'Candidate 1', 'b': 'Candidate 2', 'tie': 'Tie'}[saved]}</b>" if saved else "not judged yet"
        self._refresh()

    def _on_task(self, change):
        if not self._quiet:
            self.show(change["new"])

    def _set_choice(self, lab):
        self.choice = lab
        quiet, self._quiet = self._quiet, True
        try:
            for btn, l2 in ((self.b1, "a"), (self.b2, "b"), (self.btie, "tie")):
                btn.value = lab == l2
        finally:
            self._quiet = quiet

    def _on_choice(self, lab, change):
        if not self._quiet:
            self._set_choice(lab if change["new"] else None)

    # --- actions
    def select(self, label: str):
        """Same as clicking Candidate 1 ("a"), Candidate 2 ("b") or Tie."""
        if label not in LABELS:
            raise ValueError(f"label {label!r} is not one of {LABELS}")
        self._set_choice(label)

    def save(self):
        r = self.rows[self.current]
        if self.choice is None:
            self.status.value = "choose Candidate 1, Candidate 2 or Tie first"
            return None
        rec = self.store.save(r["pair_id"], r["query_id"], r["a"], r["b"], self.choice)
        nxt = next((k for k in range(self.current + 1, len(self.rows)) if self.rows[k]["pair_id"] not in self.store), None)
        if nxt is not None:
            self.task_list.value = nxt
        else:
            self.show(self.current)
            self.status.value = "saved; every task after this one is finished"
        self._report_agreement()
        return rec

    def remove(self):
        """First click asks for confirmation, the second removes the judgment."""
        r = self.rows[self.current]
        if r["pair_id"] not in self.store:
            self.status.value = "this task has no judgment to remove"
            return False
        if not self._confirming:
            self._confirming = True
            self.bremove.description = "Confirm removal"
            self.status.value = "click <b>Confirm removal</b> to delete the saved judgment"
            return False
        self.store.remove(r["pair_id"])
        self.show(self.current)
        self.status.value = "judgment removed"
        return True
