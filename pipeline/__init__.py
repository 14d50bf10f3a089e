"""Everything that moves mail or talks to people: parsing, sources, the store API, the CLI."""

__all__ = ["MessageStore"]


def __getattr__(name: str) -> object:
    if name == "MessageStore":
        from pipeline.store import MessageStore

        return MessageStore
    raise AttributeError(name)
