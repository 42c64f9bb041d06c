"""Throughput on a three-node Apache Kafka 4.x cluster next to the embedded broker, in one run.

The whole pipeline (``perfsift run``'s stages, one process each) and the bare two-hop passthrough
of ``bench.bench_pipeline``, each on the embedded broker (Tansu, ``guarantee: auto`` =
at-least-once, replication 1) and on the cluster of ``tests/kafka_cluster.py`` (3 KRaft nodes on
this machine, replication 3, ``min.insync.replicas`` 2, ``auto`` = exactly-once transactions).
On 2 cores the three JVMs share the CPU with the stages: compare the ratios, not the absolute rates.

    python -m bench.bench_cluster [--samples 60000]
"""

from __future__ import annotations

import argparse
import functools

from bench.bench_pipeline import passthrough, throughput
from bench.common import write_result
from tests.kafka_cluster import KafkaCluster  # the test fixture's cluster (run from the repository's root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=60_000)
    n = ap.parse_args().samples
    emb_pt = passthrough(n)
    print("embedded passthrough", emb_pt, flush=True)
    emb = throughput(n, processes=True)
    print("embedded pipeline", emb, flush=True)
    with KafkaCluster() as cluster:
        once = functools.partial(_Same, cluster)  # one cluster for both measurements
        cl_pt = passthrough(n, broker=once, replication=3)
        print("cluster passthrough", cl_pt, flush=True)
        cl = throughput(n, processes=True, broker=once, replication=3)
        print("cluster pipeline", cl, flush=True)
    rows = {
        "passthrough cluster/embedded": round(cl_pt["rate"] / emb_pt["rate"], 3),
        "pipeline cluster/embedded": round(cl["rate"] / emb["rate"], 3),
        "pipeline/passthrough embedded": round(emb["rate"] / emb_pt["rate"], 3),
        "pipeline/passthrough cluster": round(cl["rate"] / cl_pt["rate"], 3),
    }
    result = {"samples": n, "ratios": rows, "embedded": {"passthrough": emb_pt, "pipeline": emb}}
    write_result("cluster", result | {"cluster": {"passthrough": cl_pt, "pipeline": cl}})
    print(rows)


class _Same:
    """A started cluster as a context manager that neither starts nor stops it."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.bootstrap = cluster.bootstrap

    def __enter__(self) -> _Same:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
