"""Topic assignment (paper 3.2.2): :mod:`.assign` walks the ontology tree top-down with a
scorer from :mod:`.scorers` and builds the ``topics`` tables and domain reports.

May import: ``config``, ``data``, ``text``, ``ontology``, ``llm``, ``prompts``, ``embed``.
"""
from .assign import (TopicAssignment, assign_topics, domain_agreement, domain_confusion, domain_overlap,
                     domain_shares, failures_table, normalize_scores, problem_domains, subdomain,
                     topic_frequencies, topics_table)  # noqa: F401
from .scorers import (CALIBRATIONS, EmbeddingTopicScorer, FunctionScorer, Item, LLMTopicScorer,
                      TopicScorer, Visit, candidate_labels, item_text, make_scorer, problem_text,
                      scores_from_json)  # noqa: F401
