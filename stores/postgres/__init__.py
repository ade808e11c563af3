"""parlour.stores.postgres: the shared store. ``PostgresStore`` on a PostgreSQL database
(the ``parlour[postgres]`` extra), holding its ``Database`` (the pool, one round trip per
statement); its tables and migrations, its statements, the row codec and the memory of what
it last wrote. ``parlour.stores`` re-exports ``PostgresStore``.
"""

__all__: list[str] = []  # its public names are re-exported by the package above
