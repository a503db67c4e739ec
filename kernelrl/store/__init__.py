"""Exemplar store: SQLAlchemy models, Alembic migrations, the Store facade, job queue, exemplar sampling."""

from kernelrl.store.db import Store, make_engine, settings_hash

__all__ = ["Store", "make_engine", "settings_hash"]
