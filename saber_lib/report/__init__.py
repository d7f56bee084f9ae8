"""How results are shown: the one figure style and figure writer (:mod:`.plots`) and the one
Markdown/LaTeX table writer (:mod:`.tables`), both naming the backends behind the numbers.

May import: ``core``.
"""
