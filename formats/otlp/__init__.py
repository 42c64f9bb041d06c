"""OTLP metrics in and out: ``otlp_in.py`` (the walker and decoder, into an assembler),
``otlp_fast.py`` and ``_otlp_wire.py`` (a poll's protobuf messages at once), ``otlp_json.py`` (OTLP
JSON via orjson), ``otlp_out.py`` (perfsift's records as OTLP protobuf, ``otlp_out``).

Nothing is imported here: a writer of ``otlp_out`` does not load the decoders."""
