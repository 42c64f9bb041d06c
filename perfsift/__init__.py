"""perfsift: reduce performance-monitoring data in flight.

The code lives in sub-packages kept at the top of the repository, each importing only those
listed above it (docs/architecture.md):

- :mod:`perfsift.models`    performance models (structural, balance) and their files
- :mod:`perfsift.operators` pure, broker-free streaming operators (numpy), one sub-package per family
- :mod:`perfsift.schemas`   records, Avro schemas, JSON/Avro serde, column batches
- :mod:`perfsift.formats`   foreign formats in and out (OTLP, Telegraf, LDMS, Prometheus text)
- :mod:`perfsift.streams`   the Kafka runtime: config, stages, runner, embedded broker
- :mod:`perfsift.producers` sources of samples (traces, sampler, synthetic, demo) and their publishing
- :mod:`perfsift.analysis`  offline analysis and the report
- :mod:`perfsift.cli`       the ``perfsift`` command
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("perfsift")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
