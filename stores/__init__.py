"""The bottom layer: event types and schema, the Parquet event log, blobs, the DuckDB file."""

__all__ = ["blobs", "db", "errors", "events", "log"]
