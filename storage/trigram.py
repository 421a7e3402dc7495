"""PostgreSQL's ``pg_trgm``, which the `--grep` indexes need (migrations 0011 and 0015).

Made where it can be, in ``public``; where it cannot (not installed, or the role may not
create extensions) `--grep` reads every exchange and the operator is told once per
migration run, however many revisions would index a column.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

__all__ = ["trigram_schema"]

log = logging.getLogger("ssetape.storage")

_TOLD = "ssetape_no_pg_trgm"  # in the connection's info: the warning was given


def trigram_schema(conn: Connection) -> str | None:
    """The quoted schema ``pg_trgm`` is in, made first if need be; None if it cannot be."""
    try:
        with conn.begin_nested():
            # In public, not in the store's schema: an extension is one per database, and a
            # store in a schema of its own (dropped one day) must not take it along.
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
    except DBAPIError as e:
        if not conn.info.get(_TOLD):
            conn.info[_TOLD] = True
            log.warning(
                "ssetape: no pg_trgm extension (%s): --grep reads every exchange; to index "
                "it, see docs/DEPLOYMENT.md (Text search)",
                str(e.orig).splitlines()[0] if e.orig is not None else e,
            )
        return None
    # Where it is (installed before, maybe elsewhere), for a search_path that omits it.
    home: str = conn.exec_driver_sql(
        "SELECT quote_ident(nspname) FROM pg_extension e "
        "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = 'pg_trgm'"
    ).scalar_one()
    return home
