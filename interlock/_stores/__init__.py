"""The journal's stores: in memory, SQLite and PostgreSQL, and `open_store`, which picks one."""
