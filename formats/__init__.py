"""Standard telemetry in: OTLP (protobuf and JSON), Telegraf JSON and line protocol, LDMS JSON
rows, Prometheus text and remote_write, collectd JSON and Graphite, decoded into perfsift samples.

One module per family of formats (:mod:`.otlp`, :mod:`.text`, :mod:`.prometheus`,
:mod:`.remote_write`, :mod:`.influx`, :mod:`.collectd`), the mapping (:mod:`.settings`), the
long-to-wide assembler (:mod:`.assemble`); :func:`decoder_for` picks the decoder of a format.
"""

from __future__ import annotations

from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.settings import FORMATS, IngestMap, IngestSettings, load_map, parse_ingest
from perfsift.formats.text import Decoder, ldms_decoder, telegraf_decoder


def decoder_for(asm: Assembler) -> Decoder:
    """The decoder of ``asm``'s format, writing into ``asm`` (``perfsift`` samples are not
    assembled: the stage passes them through)."""
    fmt = asm.settings.format
    if fmt in ("otlp_proto", "otlp_json"):
        from perfsift.formats.otlp.otlp_fast import OtlpProtoBatch
        from perfsift.formats.otlp.otlp_in import otlp_decoder

        dec = otlp_decoder(asm, fmt)
        if fmt == "otlp_json":  # dicts from orjson, not json_format's reflection
            from perfsift.formats.otlp.otlp_json import OtlpJsonReader

            return OtlpJsonReader(dec.walker)
        if fmt == "otlp_proto":  # a poll's messages at once: the runner calls dec.many
            dec.many = OtlpProtoBatch(asm, dec.walker)
        return dec
    if fmt == "telegraf_json":
        return telegraf_decoder(asm)
    if fmt == "ldms_json":
        return ldms_decoder(asm)
    if fmt == "prometheus_text":
        from perfsift.formats.prometheus import prometheus_decoder

        return prometheus_decoder(asm)
    if fmt == "remote_write":
        from perfsift.formats.remote_write import remote_write_decoder

        return remote_write_decoder(asm)
    if fmt == "influx_line":
        from perfsift.formats.influx import influx_decoder

        return influx_decoder(asm)
    if fmt == "collectd_json":
        from perfsift.formats.collectd import collectd_decoder

        return collectd_decoder(asm)
    if fmt == "graphite":
        from perfsift.formats.collectd import graphite_decoder

        return graphite_decoder(asm)
    raise ValueError(f"format {fmt!r} has no long-record decoder")


__all__ = [
    "FORMATS",
    "Assembler",
    "Decoder",
    "IngestError",
    "IngestMap",
    "IngestSettings",
    "decoder_for",
    "load_map",
    "parse_ingest",
]
