"""Can the labels and the ranking be trusted: judge validation in one home.

Modules:

* :mod:`.agreement`: judge / annotator agreement with the paper's scoring, and the judge-validation
  stage's pairs and tables (the stage's home);
* :mod:`.reference` / :mod:`.reference_stage`: labelled reference triples read from a file, judges
  scored on them with a bootstrap over queries, and the stage's section on them;
* :mod:`.grades` / :mod:`.grades_stage`: candidates graded 0-100, graded-pair accuracy and
  per-query Spearman, and the stage's section (the ceiling of the rating design);
* :mod:`.fidelity`: how the run's retrievers are ordered under the ratings and under the grades
  (Kendall tau, rank shifts);
* :mod:`.judge_check` / :mod:`.grade_check`: ``saber judge-check`` (the run is read through the
  access object the command line passes in; this package never imports the runner);
* :mod:`.real_llm`: the stage's section on what a real model answered (replayed from a cassette);
  :mod:`.judge_replay` / :mod:`.judge_report`: a real model's judgments replayed and compared;
* :mod:`.annotate_ui`: the annotation tool (ipywidgets) that collects human labels in the notebook.

May import every layer below it (``judging``, ``retrieval``, ``evaluate``, ...) and ``studies``,
never ``pipeline``.
"""
