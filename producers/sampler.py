"""Live host sampler: this machine's metrics as per-interval rates (psutil and /proc).

Covers the twelve metrics of Vetter & Reed's Table 1 — ``cpu_idle``, ``cpu_user``, ``cpu_kern``
(% of CPU time in the interval), ``ctx_switches``, ``interrupts``, ``forks`` (per second),
``disk_lread``, ``disk_lwrite`` (logical reads/writes: read/write system calls of the processes
we may inspect, per second), ``disk_pread``, ``disk_pwrite`` (physical device reads/writes per
second), ``pkts_in``, ``pkts_out`` (network packets per second) — plus ``mem_free`` (bytes
available), ``page_in``, ``page_out`` (pages paged in/out per second) and ``swap_in``,
``swap_out``. Counters that wrap or reset give no value for that interval (never a negative rate).

Hardware counters (``cycles``, ``instructions``, ``cache_misses``, ``branch_misses`` per second)
come from Linux ``perf_event_open`` for a process (``pid``) or the whole machine when the kernel
allows it (``/proc/sys/kernel/perf_event_paranoid``), scaled for multiplexing as
``count · time_enabled / time_running`` (METHODS.md §3.3). Where perf is not available the sampler
says so once (:attr:`HostSampler.perf_note`) and goes on without them.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import time
from pathlib import Path
from typing import Any

import psutil
from perfsift.producers.synth import TABLE1

EXTRA = ("mem_free", "page_in", "page_out", "swap_in", "swap_out")


def _vmstat() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            k, _, v = line.partition(" ")
            if k in ("pgpgin", "pgpgout", "pswpin", "pswpout"):
                out[k] = int(v)
    except OSError:
        pass
    return out


def _forks() -> int | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("processes "):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _logical_io() -> tuple[int, int]:
    """read/write system calls of every process we may look at (syscr/syscw)."""
    reads = writes = 0
    for p in psutil.process_iter():
        try:
            io = p.io_counters()
        except (psutil.Error, NotImplementedError, AttributeError):
            continue
        reads += io.read_count
        writes += io.write_count
    return reads, writes


def counters() -> dict[str, float]:
    """Cumulative counters and levels right now (the sampler differences them)."""
    c: dict[str, float] = {}
    cpu = psutil.cpu_times()
    c["cpu_busy_user"] = cpu.user + getattr(cpu, "nice", 0.0)
    c["cpu_busy_kern"] = cpu.system + getattr(cpu, "irq", 0.0) + getattr(cpu, "softirq", 0.0)
    c["cpu_total"] = sum(cpu)
    c["cpu_idle_time"] = cpu.idle + getattr(cpu, "iowait", 0.0)
    st = psutil.cpu_stats()
    c["ctx_switches"] = st.ctx_switches
    c["interrupts"] = st.interrupts
    forks = _forks()
    if forks is not None:
        c["forks"] = forks
    lr, lw = _logical_io()
    c["disk_lread"], c["disk_lwrite"] = lr, lw
    disk = psutil.disk_io_counters()
    if disk is not None:
        c["disk_pread"], c["disk_pwrite"] = disk.read_count, disk.write_count
    net = psutil.net_io_counters()
    c["pkts_in"], c["pkts_out"] = net.packets_recv, net.packets_sent
    vm = _vmstat()
    for src, dst in (("pgpgin", "page_in"), ("pgpgout", "page_out"), ("pswpin", "swap_in"), ("pswpout", "swap_out")):
        if src in vm:
            c[dst] = vm[src]
    c["mem_free"] = psutil.virtual_memory().available
    return c


#: counters turned into per-second rates: Table 1 after its three CPU shares, and paging
RATES = (*TABLE1[3:], "page_in", "page_out", "swap_in", "swap_out")


def rates(prev: dict[str, float], cur: dict[str, float], seconds: float) -> dict[str, float | None]:
    """Per-interval metrics from two counter snapshots ``seconds`` apart; a counter that went
    backwards (wrap, reset, a process that left) gives None for that metric."""
    out: dict[str, float | None] = {}
    total = cur["cpu_total"] - prev["cpu_total"]
    if total > 0:
        user = max(cur["cpu_busy_user"] - prev["cpu_busy_user"], 0.0)
        kern = max(cur["cpu_busy_kern"] - prev["cpu_busy_kern"], 0.0)
        idle = max(cur["cpu_idle_time"] - prev["cpu_idle_time"], 0.0)
        out["cpu_user"] = min(100.0 * user / total, 100.0)
        out["cpu_kern"] = min(100.0 * kern / total, 100.0)
        out["cpu_idle"] = min(100.0 * idle / total, 100.0)
    else:
        out["cpu_user"] = out["cpu_kern"] = out["cpu_idle"] = None
    for k in RATES:
        if k in cur and k in prev:
            d = cur[k] - prev[k]
            out[k] = d / seconds if d >= 0 and seconds > 0 else None
    out["mem_free"] = cur["mem_free"]
    return out


# -- hardware counters through perf_event_open ------------------------------------------------------

_PERF_TYPE_HARDWARE = 0
_HW = {"cycles": 0, "instructions": 1, "cache_misses": 3, "branch_misses": 5}
_READ_FORMAT = 1 | 2  # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING
_SYSCALL = {"x86_64": 298, "aarch64": 241}


class _PerfAttr(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16),
    ]


def scale_multiplexed(count: float, enabled: float, running: float) -> float | None:
    """A multiplexed counter scaled to the whole interval: count · enabled / running (METHODS.md
    §3.3); None when the counter never ran."""
    if running <= 0:
        return None
    return count * enabled / running


class PerfCounters:
    """Hardware counters of a process (pid) or of every CPU (pid None); raises OSError when the
    kernel or the container does not allow it."""

    def __init__(self, pid: int | None = None) -> None:
        nr = _SYSCALL.get(platform.machine())
        if nr is None or not hasattr(ctypes, "CDLL"):
            raise OSError(f"perf_event_open is not known on {platform.machine()}")
        libc = ctypes.CDLL(None, use_errno=True)
        self.fds: dict[str, list[int]] = {}
        cpus = [-1] if pid is not None else list(range(os.cpu_count() or 1))
        try:
            for name, config in _HW.items():
                for cpu in cpus:
                    attr = _PerfAttr(type=_PERF_TYPE_HARDWARE, size=ctypes.sizeof(_PerfAttr), config=config)
                    attr.read_format = _READ_FORMAT
                    attr.flags = 1 << 5 if pid is not None else 0  # exclude_kernel for a process (paranoid 2)
                    fd = libc.syscall(nr, ctypes.byref(attr), pid if pid is not None else -1, cpu, -1, 0)
                    if fd < 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"perf_event_open({name}): {os.strerror(err)}")
                    self.fds.setdefault(name, []).append(fd)
        except OSError:
            self.close()
            raise
        self.last = self._read()

    def _read(self) -> dict[str, tuple[float, float, float]]:
        out = {}
        for name, fds in self.fds.items():
            tot = [0.0, 0.0, 0.0]
            for fd in fds:
                value, enabled, running = struct.unpack("QQQ", os.read(fd, 24))
                tot[0] += value
                tot[1] += enabled
                tot[2] += running
            out[name] = (tot[0], tot[1], tot[2])
        return out

    def rates(self, seconds: float) -> dict[str, float | None]:
        cur = self._read()
        out: dict[str, float | None] = {}
        for name, (v, e, r) in cur.items():
            pv, pe, pr = self.last[name]
            scaled = scale_multiplexed(v - pv, e - pe, r - pr)
            out[name] = scaled / seconds if scaled is not None and seconds > 0 else None
        self.last = cur
        return out

    def close(self) -> None:
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds = {}


class HostSampler:
    """Samples this host every ``interval`` seconds (call :meth:`sample` once per interval)."""

    def __init__(self, node: str | None = None, job: str = "host", perf: bool = True, pid: int | None = None) -> None:
        self.node = node or platform.node() or "localhost"
        self.job = job
        self.perf: PerfCounters | None = None
        self.perf_note = ""
        if perf:
            try:
                self.perf = PerfCounters(pid)
            except OSError as exc:
                self.perf_note = f"hardware counters unavailable ({exc}); sampling without them"
        self.prev = counters()
        self.prev_t = time.monotonic()
        self.seq = 0

    def sample(self) -> dict[str, Any]:
        cur = counters()
        now = time.monotonic()
        seconds = now - self.prev_t
        metrics = rates(self.prev, cur, seconds)
        if self.perf is not None:
            metrics.update(self.perf.rates(seconds))
        self.prev, self.prev_t = cur, now
        s = {"ts": time.time(), "node": self.node, "job": self.job, "seq": self.seq, "metrics": metrics}
        self.seq += 1
        return s

    def close(self) -> None:
        if self.perf is not None:
            self.perf.close()
