#!/usr/bin/env bash
# make demo: import the bundled mail into a fresh store, replay it, and ask it things.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
STORE=${MAILLEDGER_STORE:-$PWD/demo-store}
ml() { echo "\$ mailledger $*" >&2; "$BIN/mailledger" --store "$STORE" "$@"; echo >&2; }

rm -rf "$STORE"
ml import maildir fixtures/maildir
ml import mbox fixtures/lists.mbox
ml import maildir fixtures/maildir          # a re-run adds nothing
rm -f "$STORE/projections.duckdb"           # projections are disposable...
ml replay                                   # ...the log rebuilds them exactly
ml find subject 'Fwd: Re: live wire: release plan'
ml thread '<plan-2@example.org>'            # plan-3 was never delivered: a ghost holds the thread
ml query "select message_id, date_iso, from_addr from thread('<plan-2@example.org>')"
ml query "select list_id, count(*) as messages from messages where list_id is not null group by all"
ml query "select type, count(*) as events from events group by all"
ml stats
ml verify
echo "store: $STORE" >&2

# The IMAP half: a real Dovecot on loopback holding the same mail in two accounts.
if ! command -v dovecot >/dev/null 2>&1 && ! [ -x /usr/sbin/dovecot ] && [ "$(id -u)" = 0 ]; then
  echo "demo: installing dovecot-imapd for the IMAP part" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dovecot-imapd dovecot-pop3d openssl) >/dev/null 2>&1 || true
fi
rm -rf "$STORE-imap"   # a fresh Dovecot each time: an old store would see a new UIDVALIDITY
"$BIN/python" -m scripts.demo_imap "$STORE-imap"
