"""What the tests, the torture campaigns, the benchmarks and the demo share.

A private Dovecot on loopback (``testkit.dovecot``), a TCP proxy that breaks
the line on a schedule (``testkit.faultproxy``), Cyrus IMAP and Courier-IMAP
for ``make interop`` (``testkit.interop``), and the synthetic corpus generator
(``testkit.corpus``). Not part of the product: nothing under ``pipeline``,
``projections`` or ``stores`` imports it.
"""
