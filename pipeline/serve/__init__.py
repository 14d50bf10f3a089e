"""The long-running process that owns a store (``mailledger serve``) and the thin
client the command line uses to reach it.

``protocol``: the socket's place, name and messages (standard library only);
``client``: the console script's entry point, which forwards a command to the
store's server when one runs (standard library only, so that path never imports
DuckDB or pyarrow); ``server``: the process and its event loop; ``worker``: one
forwarded command in a child forked for it. They call the same ``pipeline.cli``
as the command line does and hold no rule of their own.
"""

__all__: list[str] = []
