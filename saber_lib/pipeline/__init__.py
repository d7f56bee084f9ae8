"""Running the pipeline: the stages (:mod:`.stages`), the runner that executes their notebooks with
papermill (:mod:`.runner`), the command line (:mod:`.cli`; ``saber judge-check``: :mod:`.judge_check`), the context a stage notebook works
through (:mod:`.context`) and the backend provenance of upstream stages (:mod:`.provenance`).

Top layer: may import every other part of ``saber_lib``; nothing imports it.
"""
