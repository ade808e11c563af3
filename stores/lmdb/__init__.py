"""parlour.stores.lmdb: the embedded store. ``LmdbStore`` on a directory: a conversation laid
out as a header, a body and one record per message (``_records`` in ``parlour.stores``), the
layout and its upgrades, reads, the version history, the group commit (one fsync for many
writers), the bookkeeping of what it last wrote, and the directory lock (one writing
process). ``parlour.stores`` re-exports ``LmdbStore``.
"""

__all__: list[str] = []  # its public names are re-exported by the package above
