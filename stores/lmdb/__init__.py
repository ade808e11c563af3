"""parlour.stores.lmdb: the embedded store. ``LmdbStore`` on a directory, one class holding
its collaborators: the open directory (the environment, the read gate, the group commit: one
fsync for many writers; the directory lock: one writing process), its writes (a conversation
laid out as a header, a body and one record per message: ``_records`` in ``parlour.stores``;
only what changed written, from the bookkeeping of what it last wrote), the version history
under its retention, and the administration; beside them the layout and its upgrades and
the reads. ``parlour.stores`` re-exports ``LmdbStore`` and ``StoreStatistics``.
"""

__all__: list[str] = []  # its public names are re-exported by the package above
