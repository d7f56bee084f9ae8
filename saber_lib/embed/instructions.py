"""Query instructions for the instruction arms of the evaluation (``evaluate.instruction_arms``).

An arm is a task instruction placed before the query text in one template; ``p0`` is no
instruction (the query as evaluated everywhere else). The template and the arm keys follow the
authors' instruction ablation; the texts are ours, with their intent: p1 a descriptive request, p2
one about shared reasoning despite different notation, p3 a short one, all asking for problems
solved with the same mathematical technique::

    instructed(q, "p0") = q
    instructed(q, "p2") = "Instruct: <text of p2>\\nQuery: <q>"

The instructed text is what the encoder receives as its query; an encoder with an envelope
(``registry.ENVELOPES``, e.g. E5's ``query: ``) adds it around the instructed text, as around any
query. Documents never get an instruction. Lexical retrievers take no instruction (their tokens would
only add the instruction's words to every query) and are not armed.
"""
from __future__ import annotations

TEMPLATE = "Instruct: {instruction}\nQuery: {query}"

ARMS: dict[str, str | None] = {
    "p0": None,
    "p1": ("You search a collection of mathematics problems. Return the problems whose solutions rest on the same "
           "key ideas and methods as the given problem, however differently either one is worded."),
    "p2": ("Given a math problem, find other problems whose solutions follow the same line of reasoning, even when "
           "their numbers, symbols or setting differ."),
    "p3": "Find problems solved with the same mathematical technique.",
}


def instructed(query: str, arm: str) -> str:
    """The query text of arm ``arm`` (``p0``: the query itself); an unknown arm is an error naming
    the known ones."""
    if arm not in ARMS:
        raise KeyError(f"unknown instruction arm {arm!r}: use one of {', '.join(ARMS)}")
    text = ARMS[arm]
    return query if text is None else TEMPLATE.format(instruction=text, query=query)
