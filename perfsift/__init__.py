"""perfsift: reduce performance-monitoring data in flight.

The code lives in four sub-packages, kept at the top of the repository:

- :mod:`perfsift.schemas`   records, Avro schemas, JSON/Avro serde, column batches
- :mod:`perfsift.operators` pure, broker-free streaming operators (numpy)
- :mod:`perfsift.producers` sources of samples (trace files, demo data)
- :mod:`perfsift.streams`   the Kafka runtime, embedded broker and CLI
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("perfsift")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
