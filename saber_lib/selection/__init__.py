"""Query and candidate selection (paper 3.4, App. B.3; the ``select`` stage).

May import: ``config``, ``data``, ``text``, ``signals``.
"""
from ..signals.rows import query_domains_for, usable_rows  # noqa: F401
from ..signals.thresholds import GROUPS  # noqa: F401
from .benchmark import candidate_groups, domain_quotas, eligible_counts, select_benchmark  # noqa: F401
