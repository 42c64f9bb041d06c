"""The faust app tests/integration/test_adapters_faust.py runs as a worker (and docs/faust.md shows):
perfsift's sliding mean in a faust agent, its state in a faust Table, on the embedded broker.

Settings come from the environment: PERFSIFT_FAUST_BROKER (host:port), PERFSIFT_FAUST_IN and
PERFSIFT_FAUST_OUT (topics), PERFSIFT_FAUST_APP (the app id, also the consumer group),
PERFSIFT_FAUST_DATADIR (faust's data directory; ``{app id}-data`` in the working directory if unset)."""

from __future__ import annotations

import os

import faust
from perfsift.adapters.faust_agent import OperatorAgent

app = faust.App(
    os.environ.get("PERFSIFT_FAUST_APP", "perfsift-faust"),
    broker=f"kafka://{os.environ.get('PERFSIFT_FAUST_BROKER', '127.0.0.1:9092')}",
    store="memory://",
    topic_partitions=1,
    web_enabled=False,
    datadir=os.environ.get("PERFSIFT_FAUST_DATADIR", "{conf.name}-data"),
    # on the embedded broker a worker's group join took half the session timeout: 30 s a join with
    # faust's default of 60 s, 5 s with this (measured in tests/integration/test_adapters_faust.py)
    broker_session_timeout=10.0,
)
samples = app.topic(os.environ.get("PERFSIFT_FAUST_IN", "perf.raw"), value_serializer="json")
out = app.topic(os.environ.get("PERFSIFT_FAUST_OUT", "perf.smoothed"), value_serializer="json")
state = app.Table("perfsift-state", default=None, partitions=1)


@app.agent(samples)
async def smooth(stream):  # type: ignore[no-untyped-def]
    adapter = OperatorAgent("sliding_mean", {"window": 5}, state=state, name="smooth", batch_size=200, within=0.5)
    async for _kind, record in adapter.process(stream):
        await out.send(key=record["node"], value=record)
