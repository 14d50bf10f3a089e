"""The bottom layer: event types and schema, the Parquet event log and the digest
of its files, blobs, the DuckDB file, purge, and whole-file writes."""

from stores.arrow import leave_out_remote_filesystems

__all__ = ["arrow", "atomic", "blobs", "db", "digest", "errors", "events", "log", "marker", "purge"]

leave_out_remote_filesystems()  # before anything here imports pyarrow.parquet
