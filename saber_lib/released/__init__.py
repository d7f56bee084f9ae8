"""SABER-Math as its authors released it (the ``released`` stage): read, validate and convert the
release into the tables ``evaluate`` reads (:mod:`.stage`).

May import: ``core``.
"""
