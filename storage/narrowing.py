"""How a reader's filter becomes the WHERE clause of its query on one store.

:class:`ExchangeFilter` says what a filter means, the same on every backend. PostgreSQL's
planner has statistics and indexes for every filter (the model's pattern index, the trigram
indexes of `--grep`), so the filter's own clause is all it needs. SQLite's has neither: its
``LIKE`` ignores ASCII case and so never uses the model index, `--grep` has no index but
the store's text index (an FTS5 trigram table, migration 0012), and without statistics the
planner cannot tell a value a quarter of the store has from one it has 25 times. So on
SQLite the store is asked first, in a few index seeks:

- a model prefix becomes the exact models the store has that start with it (an ``IN`` on
  the model index; none: nothing to read);
- a word becomes the exchanges its text index holds it in, when those are few (none:
  nothing to read);
- a page of a value many exchanges share walks the time index newest first instead of
  reading every match to sort them (``likely()`` keeps the planner off the value's index).

What each query then returns is exactly what the filter's own clause returns: the models
are those its prefix matches in SQLite's own terms, and a word's ``LIKE`` stays in the query
beside the ids the index found.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Select,
    and_,
    column,
    false,
    func,
    select,
    table,
    union,
    union_all,
)

from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.storage.text_index import COLUMNS, TABLE, TextIndex

__all__ = ["Narrowing"]

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")

# Matches past which a filtered page walks the time index: at this many of a million, a
# page of 50 walks some 25,000 index entries (~20 ms).
COMMON = 2000

# Distinct models read to resolve a prefix (one index seek each, ~2 µs); a store with more
# matches the prefix by LIKE, as before.
MODELS = 10_000
# Models one IN may name: SQLite before 3.32 takes at most 999 variables a statement.
IN_LIMIT = 500

# The text index's FTS5 table (see storage.text_index), as the probes read it.
_text = table(TABLE, column("rowid"), *(column(c) for c in COLUMNS))

# SQLite's LIKE folds ASCII letters only.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _trigram(text: str) -> bool:
    """Whether the trigram index can look ``text`` up: a run of 3 characters that are not
    LIKE's wildcards (shorter, FTS5 would read its whole table)."""
    return any(len(run) >= 3 for run in text.replace("_", "%").split("%"))


class Narrowing:
    """Filters made into clauses for one store (see the module's text)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def apply(self, stmt: S, filters: ExchangeFilter, *, paged: bool = False) -> S:
        """``stmt`` narrowed to the exchanges ``filters`` match; ``paged``: it reads only a
        page of them, newest first."""
        if not self.store.is_sqlite:
            return filters.apply(stmt)
        models = self._models(filters.model) if filters.model else None
        found = self._texts(filters.text) if filters.text and models != [] else None
        if models == [] or found == 0:
            return stmt.where(false())  # no exchange has that model, or that word
        indexed: list[ColumnElement[bool]] = [] if models is None else [Exchange.model.in_(models)]
        extra = list(indexed)
        if filters.text and found is not None and found < COMMON:
            extra.append(Exchange.id.in_(self._holding(filters.text)))
            paged = False  # those few ids, sorted, are the page: no walk of the time index
        # The resolved models stand for the prefix; every other clause stays as the filter
        # writes it (a word's LIKE beside its ids).
        rest = filters if models is None else dataclasses.replace(filters, model=None)
        cond = rest.apply(select(Exchange.id)).whereclause
        parts = [c for c in (cond, *extra) if c is not None]
        if not parts:
            return stmt
        where = and_(*parts)
        if paged and self._common(filters, indexed):
            return stmt.where(func.likely(where, type_=Boolean))
        return stmt.where(where)

    # -- what the store is asked first ---------------------------------------------------

    def _common(self, filters: ExchangeFilter, indexed: list[ColumnElement[bool]]) -> bool:
        """Whether at least COMMON exchanges match the filters SQLite would read through an
        index of their own (api, outcome, the resolved models: equalities on indexed
        columns), reading no more index entries than that. (Hosts and words are not read that
        way: the planner walks the time index for them already.)"""
        cond = ExchangeFilter(api=filters.api, outcome=filters.outcome).apply(
            select(Exchange.id).where(*indexed)
        )
        if cond.whereclause is None:
            return False
        probe = cond.limit(COMMON).subquery()
        with self.store.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(probe)).scalar_one() >= COMMON

    def _models(self, prefix: str) -> list[str] | None:
        """The models the store has that ``prefix`` names as the filter does (itself, or
        starting with it in SQLite's LIKE: ASCII case ignored), read off the model index one
        distinct value at a time; None past MODELS distinct models or IN_LIMIT matches."""
        seen = select(func.min(Exchange.model).label("v")).cte("models", recursive=True)
        after = select(func.min(Exchange.model)).where(Exchange.model > seen.c.v)
        seen = seen.union_all(select(after.scalar_subquery()).where(seen.c.v.is_not(None)))
        stmt = select(seen.c.v).where(seen.c.v.is_not(None)).limit(MODELS + 1)
        with self.store.engine.connect() as conn:
            names = list(conn.execute(stmt).scalars())
        if len(names) > MODELS:
            return None
        low = prefix.translate(_ASCII_LOWER)
        found = [m for m in names if m == prefix or m.translate(_ASCII_LOWER).startswith(low)]
        return found if len(found) <= IN_LIMIT else None

    def _texts(self, text: str) -> int | None:
        """How many exchanges the text index holds ``text`` in, counted up to COMMON (a
        superset of those the filter matches: the index folds case more widely, and LIKE's
        wildcards in ``text`` match anything there); None when there is no index to ask."""
        if not _trigram(text) or not self._has_text_index():
            return None
        probe = self._holding(text, distinct=False)  # a count, stopped at COMMON
        counted = select(func.count()).select_from(probe.limit(COMMON).subquery())
        with self.store.engine.connect() as conn:
            return int(conn.execute(counted).scalar_one())

    @staticmethod
    def _holding(text: str, *, distinct: bool = True) -> Any:
        """The ids of the exchanges the text index holds ``text`` in, as a subquery (each
        once, unless not ``distinct``). The pattern has no ESCAPE: FTS5 reads its index only
        for a plain LIKE, one column at a time (so a union, not an OR)."""
        pattern = f"%{text}%"
        parts = [select(_text.c.rowid).where(_text.c[name].like(pattern)) for name in COLUMNS]
        return union(*parts) if distinct else union_all(*parts)

    def _has_text_index(self) -> bool:
        """Whether the index may be asked: asked each time, not kept (a long-lived viewer
        must not trust an index another process's SQLite has since stopped keeping)."""
        with self.store.engine.connect() as conn:
            return TextIndex.ready(conn)
