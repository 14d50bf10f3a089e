"""The bottom layer: event types and schema, the Parquet event log and the digest
of its files, blobs, the DuckDB file, purge, and whole-file writes."""

__all__ = ["arrow", "atomic", "blobs", "db", "digest", "errors", "events", "log", "marker", "purge"]
