"""A JSON Schema of the pipeline file, generated from what reads it: the settings of
:class:`~perfsift.streams.config.PipelineConfig`, the ``limits:`` of
:class:`~perfsift.streams.limits.Limits` and each operator's constructor signature
(:data:`~perfsift.operators.registry.OPERATORS`); and the check of a file against it with
``file:line`` positions (from PyYAML's node marks) and "did you mean" suggestions.

``perfsift validate --schema`` prints the schema; ``docs/pipeline.schema.json`` is a copy kept in
step by a test. Editors that read JSON Schema (e.g. the YAML language server) can use it.
"""

from __future__ import annotations

import difflib
import inspect
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import yaml
from perfsift.formats.settings import FORMATS
from perfsift.operators.registry import OPERATORS
from perfsift.streams.config import _SCALARS, ENCODINGS, GUARANTEES, PipelineConfig
from perfsift.streams.limits import Limits

from perfsift import __version__

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _type_schema(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of a Python annotation as YAML can give it (unknown classes: anything)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if annotation is Path:
        return {"type": "string"}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in args if a is not type(None)]
        if type(None) in args:
            options.append({"type": "null"})
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        return {"type": "array", **({"items": _type_schema(args[0])} if args and args[0] is not Ellipsis else {})}
    if origin in (dict, Mapping) or annotation is dict:
        return {"type": "object"}
    return {}


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def operator_schema(name: str) -> dict[str, Any]:
    """One operator entry of a stage: ``type``, ``publish`` and the constructor's parameters."""
    cls = OPERATORS[name]
    hints = typing.get_type_hints(cls.__init__)
    props: dict[str, Any] = {
        "type": {"const": name},
        "publish": {"type": "array", "items": {"type": "string"}, "description": "extra topics (not the last)"},
    }
    required = ["type"]
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        s = _type_schema(hints.get(p.name, Any))
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        elif p.default is None or isinstance(p.default, bool | int | float | str | tuple | list):
            s["default"] = _jsonable(p.default)
        props[p.name] = s
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    return {
        "type": "object",
        "description": doc,
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def pipeline_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a pipeline file."""
    defaults = {f.name: f.default for f in fields(PipelineConfig)}
    settings: dict[str, Any] = {k: {**_type_schema(t), "default": defaults[k]} for k, t in _SCALARS.items()}
    settings["guarantee"]["enum"] = list(GUARANTEES)
    settings["encoding"]["enum"] = list(ENCODINGS)
    settings["otlp_out"] = {
        "type": ["string", "boolean"],
        "default": False,
        "description": "also publish the results as OTLP metrics: true (topic perf.reduced.otlp) or a topic name",
    }
    for key in ("partitions", "batch_size", "replication"):
        settings[key]["minimum"] = 1
    limits = {
        f.name: {"type": "integer", "minimum": 1, "default": f.default}
        for f in fields(Limits)
        if f.default is not MISSING
    }
    names = sorted(OPERATORS)
    operator = {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": names}},
        "allOf": [{"if": {"properties": {"type": {"const": n}}}, "then": {"$ref": f"#/$defs/{n}"}} for n in names],
    }
    stage = {
        "type": "object",
        "required": ["input"],
        "properties": {
            "input": {"type": "string"},
            "outputs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "operators": {"type": "array", "items": {"$ref": "#/$defs/operator"}},
            "emit": {"type": "string"},
            "ingest": {
                "type": "object",
                "description": "long records in (perfsift ingest): the input format, the naming map, the lateness",
                "required": ["format"],
                "properties": {
                    "format": {"enum": list(FORMATS)},
                    "map": {"type": ["string", "object"], "description": "a --map file or the mapping itself"},
                    "max_delay": {"type": "number", "minimum": 0, "default": 5.0},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://perfsift.invalid/pipeline-{__version__}.schema.json",
        "title": "perfsift pipeline file",
        "type": "object",
        "properties": {
            **settings,
            "limits": {"type": "object", "properties": limits, "additionalProperties": False},
            "kafka": {
                "type": "object",
                "description": "librdkafka properties of every client",
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
            "schema_registry": {
                "type": "object",
                "description": "Schema Registry client settings of encoding: confluent-avro (url, ...)",
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
            "stages": {"type": "object", "additionalProperties": {"$ref": "#/$defs/stage"}},
        },
        "additionalProperties": False,
        "$defs": {"stage": stage, "operator": operator, **{n: operator_schema(n) for n in names}},
    }


# -- checking a file -------------------------------------------------------------------------------
def _lines(node: yaml.Node, path: tuple[Any, ...] = (), out: dict[tuple[Any, ...], int] | None = None) -> dict:
    """1-based line of every key (for a mapping entry) or item, by its path in the document."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            k = yaml.safe_load(yaml.serialize(key)) if not isinstance(key, yaml.ScalarNode) else key.value
            out[(*path, k)] = key.start_mark.line + 1
            _lines(value, (*path, k), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _lines(item, (*path, i), out)
    return out


def _where(path: Sequence[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(path))


def _suggest(error: Any) -> tuple[tuple[Any, ...], str]:
    """For an unexpected key: its path and a ' (did you mean ...?)' from the keys allowed there."""
    extra = re.findall(r"'([^']+)'", error.message) if error.validator == "additionalProperties" else []
    allowed = list(error.schema.get("properties", {})) if isinstance(error.schema, dict) else []
    for key in extra:
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else (f"; allowed: {', '.join(allowed)}" if allowed else "")
        return (*error.absolute_path, key), hint
    if error.validator in ("enum", "const") and isinstance(error.instance, str):
        options = error.validator_value if error.validator == "enum" else [error.validator_value]
        close = difflib.get_close_matches(error.instance, [str(o) for o in options], n=1)
        return tuple(error.absolute_path), f" (did you mean {close[0]!r}?)" if close else ""
    return tuple(error.absolute_path), ""


def schema_errors(path: Path) -> list[str]:
    """``file:line: where: message`` for each place ``path`` breaks :func:`pipeline_schema` (empty
    when it fits; YAML syntax errors come as one such line)."""
    from jsonschema import Draft202012Validator

    text = path.read_text()
    try:
        node = yaml.compose(text)
        doc = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        return [f"{path}:{line}: not valid YAML: {exc.problem}"]
    lines = _lines(node) if node is not None else {}
    validator = Draft202012Validator(pipeline_schema())
    out = []
    for error in validator.iter_errors(doc or {}):
        if error.validator in ("if", "allOf"):  # the operator's own schema reports the detail
            continue
        where, hint = _suggest(error)
        line = next((lines[where[:n]] for n in range(len(where), 0, -1) if where[:n] in lines), 1)
        out.append((line, f"{path}:{line}: {_where(where) or '(top level)'}: {error.message}{hint}"))
    return [text for _, text in sorted(out)]


def config_error_line(path: Path, message: str) -> str:
    """A :class:`~perfsift.streams.config.ConfigError` message (``source: where: msg``) with the
    line of ``where`` in ``path`` (``stages.node.operators[0]`` -> its line), when it names one."""
    text = path.read_text()
    prefix = f"{path}: "
    rest = message.removeprefix(prefix)
    m = re.match(r"([A-Za-z_][\w.\[\]-]*): ", rest)
    if not message.startswith(prefix) or m is None:
        return message
    where = tuple(int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", m.group(1)))
    node = yaml.compose(text)
    lines = _lines(node) if node is not None else {}
    for n in range(len(where), 0, -1):
        if where[:n] in lines:
            return f"{path}:{lines[where[:n]]}: {rest}"
    return message
