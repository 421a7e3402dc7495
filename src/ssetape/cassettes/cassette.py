"""A cassette file: recorded exchanges in the format of :mod:`ssetape.cassettes.format`.

:class:`Cassette` is the object a user names (``tape.jsonl``): it reads its lines within the
size limits, validates them, imports them into a store in one transaction (all or nothing) and
exports a store's exchanges into it, written 0600 and replaced atomically.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

from ssetape.analysis.knowledge import Knowledge
from ssetape.cassettes.codec import CassetteError
from ssetape.cassettes.format import MAX_BYTES, MAX_LINE_BYTES, ImportReport, read_records
from ssetape.cassettes.store_io import (
    Narrow,
    Progress,
    insert_exchange,
    insert_rows,
    redacted,
    write_cassette,
)
from ssetape.files import private_file
from ssetape.storage.cassette_rows import CassetteRows, Inserts
from ssetape.storage.store import Store

__all__ = ["Cassette", "CassetteError", "ImportReport"]

_BATCH = 2_000  # events or chunks inserted at a time: what an import holds of an exchange


class Cassette:
    """One cassette file: export a store's exchanges to it, or import it into a store."""

    def __init__(
        self, path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES, max_bytes: int = MAX_BYTES
    ) -> None:
        self.path = Path(path)
        self.max_line_bytes = max_line_bytes
        self.max_bytes = max_bytes
        self._read = 0  # bytes read so far, for progress bars

    # -- writing ---------------------------------------------------------------

    def export(
        self, store: Store, narrow: Narrow | None = None, *, progress: Progress | None = None,
        store_ids: bool = False,
    ) -> int:  # fmt: skip
        """Write the store's exchanges (those ``narrow`` selects); returns how many.
        ``store_ids``: see :func:`~ssetape.cassettes.store_io.write_cassette`."""
        try:
            with private_file(self.path) as out:
                return write_cassette(store, out, narrow, progress=progress, store_ids=store_ids)
        except OSError as e:
            raise CassetteError(f"cannot write {self.path}: {e.strerror or e}") from None

    # -- reading ---------------------------------------------------------------

    def records(
        self, report: ImportReport | None = None
    ) -> Generator[tuple[int, str, dict[str, Any]]]:
        """Validated (line number, kind, column values) of every line after the header.

        Unknown keys are dropped (and noted in ``report``); everything else that is wrong
        raises CassetteError naming the line.
        """
        report = report if report is not None else ImportReport()
        yield from read_records(str(self.path), self._lines(), report)

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        total = 0
        try:
            f = self.path.open("rb")
        except OSError as e:
            raise CassetteError(f"cannot read {self.path}: {e.strerror or e}") from None
        with f:
            number = 0
            while True:
                raw = f.readline(self.max_line_bytes + 1)
                if not raw:
                    return
                number += 1
                total += len(raw)
                self._read = total
                # One copy at a time: a line can be 64 MiB, and this frame would keep one
                # while the caller parses and stores the next (hence the list, emptied below).
                line = [raw[:-1] if raw.endswith(b"\n") else raw]
                del raw
                if len(line[0]) > self.max_line_bytes:
                    raise CassetteError(
                        f"{self.path}:{number}: line longer than {self.max_line_bytes} bytes "
                        "(raise the line limit if this cassette is trusted)"
                    )
                if total > self.max_bytes:
                    raise CassetteError(
                        f"{self.path}:{number}: cassette larger than {self.max_bytes} bytes "
                        "(raise the size limit if it is trusted)"
                    )
                yield number, line.pop()

    def import_into(
        self,
        store: Store,
        *,
        progress: Progress | None = None,
        profiles: Mapping[str, str] | None = None,
    ) -> ImportReport:
        """Add the cassette's exchanges to ``store`` in one transaction (all or nothing).

        Exchanges whose uid the store already has are skipped, so importing twice is
        harmless. What goes in is redacted as the store redacts what it records (its key, its
        fields and the cassette's), so no secret the cassette carries reaches the store; the
        cassette's redacted fields join the store's, so later recordings and replays mask the
        same fields. ``profiles``: HOST=NAME provider profiles to read the streams under.
        """
        report = ImportReport()
        size = self._size()
        records = self.records(report)
        first = next(records, None)  # the header is read: its redacted fields are known
        # Outside the transaction (SQLite has one writer); the fields are kept on success only.
        redactor = store.redactor((), report.redact_fields, keep=False)
        with CassetteRows(store).importing() as inserts:
            target = _Target(inserts, report)
            for number, kind, values in chain([first] if first else [], records):
                if kind != "exchange":
                    if target.add(kind, values) and progress is not None:
                        progress(min(self._read, size), size)
                    continue
                target.close()
                target.open(number, redacted(values, redactor))
                if progress is not None:
                    progress(min(self._read, size), size)
            target.close()
        # Findings are not in cassettes, and a cassette from an older ssetape lacks the
        # knowledge columns: derive both here, as the recorder would have.
        Knowledge(store, profiles=profiles).reanalyse(sorted(report.lines))
        if report.redact_fields:
            store.add_redact_fields(report.redact_fields)
        if progress is not None:
            progress(size, size)
        return report

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def check(self) -> ImportReport:
        """Validate the whole file without a store."""
        report = ImportReport()
        for _ in self.records(report):
            pass
        return report


class _Target:
    """The exchange an import is adding rows to: its events and chunks go in by the batch,
    so a two-million-event exchange costs a batch of memory, not two million rows."""

    def __init__(self, inserts: Inserts, report: ImportReport) -> None:
        self.inserts = inserts
        self.report = report
        self.xid: int | None = None  # None: no exchange yet, or one the store has (skipped)
        self.counted = True  # whether the exchange line carried its event count (version 1)
        self.events = 0
        self.rows: dict[str, list[dict[str, Any]]] = {"event": [], "chunk": []}

    def open(self, number: int, values: dict[str, Any]) -> None:
        self.counted = "event_count" in values
        self.xid = insert_exchange(self.inserts, self.report, number, values)
        self.events = 0

    def add(self, kind: str, values: dict[str, Any]) -> bool:
        """Queue one row; whether a batch went in."""
        if self.xid is None:
            return False  # the rows of an exchange the store has already
        rows = self.rows[kind]
        rows.append(values)
        if len(rows) < _BATCH:
            return False
        self._flush(kind)
        return True

    def close(self) -> None:
        if self.xid is None:
            return
        self._flush("event")
        self._flush("chunk")
        if not self.counted:
            self.inserts.event_count(self.xid, self.events)
        self.xid = None

    def _flush(self, kind: str) -> None:
        assert self.xid is not None
        rows = self.rows[kind]
        if kind == "event":
            self.events += len(rows)
        insert_rows(self.inserts, self.report, kind, rows, self.xid)
        self.rows[kind] = []
