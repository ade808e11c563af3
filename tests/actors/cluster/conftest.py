"""One real local Ray cluster for the whole session (a head and one worker node, loopback
only, no usage statistics, no dashboard), the real PostgreSQL of the store tests, and the
factories module on the workers' path. Without Ray installed the cluster tests are skipped.

Time budget: the cluster tests take about 30 s on two cores, most of it starting Ray.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # cluster_agents, for the shards and for ShardHost tests


def _store_fixtures() -> Any:
    spec = importlib.util.spec_from_file_location(
        "parlour_tests_store_conftest", HERE.parents[1] / "stores" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_stores = _store_fixtures()
postgres_dsn = _stores.postgres_dsn
postgres_conninfo = _stores.postgres_conninfo

# Ray resolves 127.0.0.1 to the machine's outward address unless told it is a one-machine
# cluster; this keeps every connection on the loopback interface.
# (Ray reads these when it is first imported, so they are set before any test runs.)
os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
NODE: dict[str, Any] = {
    "num_cpus": 2,
    "object_store_memory": 100 * 1024 * 1024,
    "node_ip_address": "127.0.0.1",
}


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """``ray.cluster_utils.Cluster``: a head and one worker node, connected."""
    saved = {"PYTHONPATH": os.environ.get("PYTHONPATH")}
    ray = pytest.importorskip("ray", reason="the cluster tests need pip install -e '.[cluster]'")
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), saved["PYTHONPATH"]) if p)
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    cluster.add_node(**NODE)
    ray.init(address=cluster.address, namespace="parlour-test", _node_ip_address="127.0.0.1")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def _gate(ray_cluster: Any) -> Any:
    import ray
    from cluster_agents import GATE, NAMESPACE, Gate  # type: ignore[import-not-found]

    return ray.remote(Gate).options(name=GATE, namespace=NAMESPACE, num_cpus=0).remote()


@pytest.fixture
def gate(_gate: Any) -> Any:
    """The gate the ``hold`` tool waits on (named for the shards to find), closed afresh."""
    import ray

    ray.get(_gate.reset.remote())
    return _gate
