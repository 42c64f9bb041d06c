"""Standard telemetry in: OTLP (protobuf and JSON), Telegraf JSON, LDMS JSON rows and the
Prometheus text format, decoded into perfsift samples.

One module per family of formats (:mod:`.otlp`, :mod:`.text`), the mapping (:mod:`.settings`), the
long-to-wide assembler (:mod:`.assemble`); :func:`decoder_for` picks the decoder of a format.
"""

from __future__ import annotations

from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.settings import FORMATS, IngestMap, IngestSettings, load_map, parse_ingest
from perfsift.formats.text import Decoder, ldms_decoder, prometheus_decoder, telegraf_decoder


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
        return prometheus_decoder(asm)
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
