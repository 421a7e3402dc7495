"""Where a store's schema stands against this ssetape's, read without changing anything:
what `ssetape db status` tells an operator before switching binaries (every other command
migrates a store when it opens it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import inspect, text

from ssetape.storage.engine import create_store_engine, prepare_sqlite_file, resolve_target
from ssetape.storage.store import alembic_config

__all__ = ["SchemaStatus"]


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: tuple[str, ...]  # the store's revision(s); empty: no ssetape schema yet
    head: str  # this ssetape's
    pending: list[tuple[str, str]] = field(default_factory=list)  # (revision, what it does)
    newer: bool = False  # a revision this ssetape does not know: a newer ssetape's

    @property
    def state(self) -> str:
        """``current``, ``behind`` (opening it with this ssetape migrates it), ``newer``
        (this ssetape refuses it: upgrade ssetape) or ``empty`` (nothing made it yet)."""
        if self.newer:
            return "newer"
        if not self.current:
            return "empty"
        return "current" if self.current == (self.head,) else "behind"

    @classmethod
    def read(cls, target: str) -> SchemaStatus:
        """The status of the store at ``target`` (a file path or URL); StoreError (one line)
        when it cannot be read. An SQLite file that does not exist is not created."""
        from alembic.script import ScriptDirectory

        url, path = resolve_target(target)
        if path is not None:
            prepare_sqlite_file(path, create=False)
        script = ScriptDirectory.from_config(alembic_config())
        head = script.get_current_head() or ""
        engine = create_store_engine(url)
        try:
            with engine.connect() as conn:
                current: tuple[str, ...] = ()
                if inspect(conn).has_table("alembic_version"):
                    rows = conn.execute(text("SELECT version_num FROM alembic_version"))
                    current = tuple(rows.scalars())
        finally:
            engine.dispose()
        known = {rev.revision: rev for rev in script.walk_revisions()}
        if any(rev not in known for rev in current):
            return cls(current, head, newer=True)
        base = current[0] if current else None
        pending = [
            (rev.revision, (rev.doc or "").splitlines()[0] if rev.doc else "")
            for rev in reversed(list(script.iterate_revisions(head, base)))
        ]
        return cls(current, head, pending)
