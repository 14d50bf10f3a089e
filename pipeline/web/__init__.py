"""The archive in a browser and a JSON API (``mailledger web``; ``serve --listen``
mounts the same app): Starlette, Jinja2 with autoescape, nh3. Imported only by
that command: the rest of the command line never loads a web library."""

from pipeline.web.app import create_app

__all__ = ["create_app"]
