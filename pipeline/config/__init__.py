"""The configuration file, read once at the edge into typed, frozen objects.

``load_config(path, env)`` parses the TOML file, checks every value and returns a
:class:`Config`. Nothing deeper in mailledger reads the file or ``os.environ``:
the fetchers get an :class:`Account`, and its password through
:func:`resolve_secret` at the moment they log in.

Every problem is a :class:`~stores.errors.ConfigError` (exit 2) whose message
names the file and the key, for example::

    config.toml: accounts.fastmail.port: must be an integer 1-65535, got "x"

All problems found in one file are reported together, one per line. Values
that may hold a secret (unknown keys such as ``password``, ``password_command``,
the output of that command, environment values) never appear in a message or a
repr.

File shape (keys may be added, never renamed)::

    [accounts.fastmail]
    type = "imap"                  # "imap" | "pop3"
    host = "imap.fastmail.com"
    port = 993                     # default from type and tls
    tls = "implicit"               # "implicit" | "starttls" | "none"
    insecure = false               # true: allow tls = "none" to a non-loopback host
    ca_file = "/path/ca.pem"       # optional extra CA
    username = "me@fastmail.com"
    password_env = "MAIL_FASTMAIL_PASSWORD"   # or password_command = "pass show fastmail"
    auth = "password"              # "password" | "xoauth2"
    folders = ["INBOX", '\\Archive']          # a leading backslash: a SPECIAL-USE attribute
    exclude = []
    initial = "full"               # "full" | "new-only" | "since:2026-06-01"
    delete_after = "never"         # pop3: "never" | "stored"
    timeout = 60                   # seconds an IMAP connect or read may take; a server
                                   # stalling longer fails the folder cleanly (exit 1)
    [store]                        # read by every command, not only sync
    path = "/var/lib/mailledger"   # relative: to this file's directory
    memory = "1GiB"                # what a replay or verify may use (default: a
                                   # quarter of the machine, at most 1 GiB)
    [metrics]
    file = "/var/lib/node-exporter/mailledger.prom"
    [dispatch]                     # kept raw; checked by the dispatch command
                                   # (pipeline.config.dispatch)

The modules: ``model`` the objects, ``loading`` the file read into them,
``accounts`` one account table checked, ``credentials`` the password and the
TLS context, ``reading`` what they share, ``dispatch`` the ``[dispatch]`` table.
"""

from pipeline.config.credentials import is_loopback, resolve_secret, tls_context
from pipeline.config.loading import load_config, load_store_settings
from pipeline.config.model import (
    DEFAULT_EXCLUDE,
    SPECIAL_USE,
    Account,
    Config,
    InitialMode,
    StoreSettings,
    default_config_path,
)
from pipeline.config.reading import show_value

__all__ = [
    "DEFAULT_EXCLUDE",
    "SPECIAL_USE",
    "Account",
    "Config",
    "InitialMode",
    "StoreSettings",
    "default_config_path",
    "is_loopback",
    "load_config",
    "load_store_settings",
    "resolve_secret",
    "show_value",
    "tls_context",
]
