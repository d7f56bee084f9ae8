"""Every system that scores documents for a query, and the one registry of their names.

* the interface (:mod:`.base`): ``score(query, documents)``, ``score_many``; any object with
  ``score`` is wrapped into it;
* the registry (:mod:`.registry`): :func:`register_retriever` on a factory, :func:`get_retriever`
  by name, the names and checks every other package reads (:mod:`.checks`: a profile's names);
* lexical retrievers (:mod:`.lexical`: ``bm25``, ``tfidf``, ``jaccard``), the authors' baselines
  and their tokenizations (:mod:`.authors`: ``bm25-a0`` ... ``jaccard-ws``), Approach Zero
  (:mod:`.approach0`), dense retrievers over ``saber_lib.embed`` (:mod:`.dense`), TREC run files
  (:mod:`.runs`: ``run:<path>``, reading and writing runs and qrels);
* the whole-corpus indexes (:mod:`.indexes`, cached by :mod:`.index_cache`) and their use as a
  first stage or a corpus-wide scorer (:mod:`.corpus`).

A new built-in retriever is one module here with a registered factory (the registry imports every
module of this package); a user's retriever is a plugin (``run.plugins``, docs/extending.md).
May import: ``core``, ``embed``, ``signals`` (the token-set Jaccard).
Public API (docs/public_api.md), importable from here: ``Retriever``, ``get_retriever``,
``register_retriever``, ``retriever_names``.
"""
from .base import Retriever  # noqa: F401
from .registry import get_retriever, register_retriever  # noqa: F401
from .registry import retriever_names  # noqa: F401
