"""Solution summaries (paper 3.3; the ``summaries`` stage): the summarizers and the summaries table
(:mod:`.summarize`), and the stage's recipes: the LLM sample beside a stand-in, the failure budget,
the length figure and the overview table (:mod:`.stage`).

May import: ``core``, ``llm``, ``prompts``.
"""
