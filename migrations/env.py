"""Alembic environment for ssetape.

Migrations are run by ``Store.open`` (see ``ssetape.storage.store``), which
builds the Alembic ``Config`` in code and hands over an open connection in
``config.attributes["connection"]``, already inside the transaction that holds
the migration lock; there is no alembic.ini. Offline (``--sql``) mode works
when a ``sqlalchemy.url`` option is set on the config.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from ssetape.storage.models import Base, include_object

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("offline migrations need the sqlalchemy.url option")
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object(connection.dialect.name),
        # SQLite can alter hardly anything in place: batch mode recreates tables.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    conn = config.attributes.get("connection")
    if not isinstance(conn, Connection):
        raise RuntimeError(
            "ssetape migrations run from ssetape.storage.store.Store.open(), "
            'which passes config.attributes["connection"]'
        )
    run_migrations_online(conn)
