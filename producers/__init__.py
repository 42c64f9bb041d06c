"""Sources of samples: trace files and the bundled demo trace."""

from perfsift.producers.demo import demo_trace_path, generate_demo
from perfsift.producers.jsonl import iter_jsonl_samples, number_samples

__all__ = ["demo_trace_path", "generate_demo", "iter_jsonl_samples", "number_samples"]
