"""The full-text projection: the searchable text of each stored message in an
SQLite FTS5 index beside the DuckDB projections (``STORE/fulltext.sqlite``)."""
