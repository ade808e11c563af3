"""parlour.actors.app: the ``parlour`` command. ``parlour demo``, ``chat``, ``bench`` and the
store commands (``show``, ``list``, ``export``, ``import``, ``delete``, ``fsck``), the
benchmark cases and workloads they run, ``serve`` (the HTTP host, in ``serve/``) and the
cluster's ``status``. Installed as the ``parlour`` console script (``_cli.main``).
"""

__all__: list[str] = []  # its public names are re-exported by the package above
