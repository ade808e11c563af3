"""parlour.stores.postgres: the shared store. ``PostgresStore`` on a PostgreSQL database
(the ``parlour[postgres]`` extra): its tables and migrations, its statements (one round trip
each), and the row codec and pool around them. ``parlour.stores`` re-exports
``PostgresStore``.
"""

__all__: list[str] = []  # its public names are re-exported by the package above
