"""perfsift's operators inside other stream frameworks (issue #30), as optional extras.

- :mod:`perfsift.adapters.faust_agent` (``pip install 'perfsift[faust]'``): an operator, or a
  pipeline file's stage, run in a faust agent on micro-batches, its state in a faust Table.
- :mod:`perfsift.adapters.river` (``pip install 'perfsift[river]'``): river-compatible wrappers
  (an anomaly detector, forecasters, transformers on dicts).

The layer sits above the runtime (it may use ``streams``' stage core) and below ``cli``; nothing
else in perfsift imports it, so perfsift runs without faust or river installed.
"""
