"""Pure folds from events to tables, and the one copy of the normalization rules."""

__all__ = ["fold", "normalize", "tables"]
