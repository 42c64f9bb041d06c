"""The event-time aligner's state machine (streams/align.py), driven by a fake consumer."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from perfsift.operators.batch import Batch
from perfsift.schemas import encode_batch
from perfsift.streams.align import Aligner, event_times

A, B, C = ("in", 0), ("in", 1), ("in", 2)
NOW = 0.05  # the unit tests' deliveries come at the start; their release times are given


def times(ms: Sequence[float]) -> npt.NDArray[np.float64]:  # a message is its event time here
    return np.asarray(ms, dtype=np.float64)


class FakeConsumer:
    """Each partition a backlog of event times; a fetch returns up to ``fetch`` messages of one
    partition after another (as librdkafka hands a backlog over), skipping paused ones; a partition
    whose backlog is empty reports its end once."""

    def __init__(self, logs: dict, fetch: int) -> None:
        self.logs = {tp: list(ts) for tp, ts in logs.items()}
        self.pos = dict.fromkeys(logs, 0)
        self.fetch = fetch
        self.paused: set = set()
        self.calls: list[tuple[str, tuple]] = []
        self.eof_told: set = set()

    def pause(self, tps: list) -> None:
        self.calls += [("pause", tp) for tp in tps]
        self.paused |= set(tps)

    def resume(self, tps: list) -> None:
        self.calls += [("resume", tp) for tp in tps]
        self.paused -= set(tps)

    def consume(self) -> tuple[dict, list]:
        batch, eofs = {}, []
        for tp, log in self.logs.items():
            if tp in self.paused:
                continue
            got = log[self.pos[tp] : self.pos[tp] + self.fetch]
            self.pos[tp] += len(got)
            if got:
                batch[tp] = got
            elif tp not in self.eof_told:
                self.eof_told.add(tp)
                eofs.append(tp)
        return batch, eofs


def drive(
    al: Aligner, consumer: FakeConsumer, rounds: int = 500, held: list[int] | None = None
) -> list[tuple[tuple, float]]:
    """The runner's loop: route, release, process (record the order), pause/resume; ``held``
    gets what the aligner holds after each consume batch is routed."""
    out: list[tuple[tuple, float]] = []
    now = 100.0
    al.assign(list(consumer.logs), now)
    for _ in range(rounds):
        now += 0.1
        batch, eofs = consumer.consume()
        routed = [(tp, al.route(tp, ms, now)) for tp, ms in batch.items()]
        if held is not None:
            held.append(al.held)
        for tp in eofs:
            al.at_end(tp)
        for tp, ms in [*routed, *al.release(now)]:
            out += [(tp, t) for t in ms]
            if ms:
                al.seen(tp, max(ms))
        pause, resume = al.changes(now)
        consumer.pause(pause)
        consumer.resume(resume)
        if not batch and not al.pending and all(consumer.pos[tp] == len(lg) for tp, lg in consumer.logs.items()):
            break
    return out


def max_skew(out: list[tuple[tuple, float]], parts: list) -> float:
    """At each processed message: its time minus the lowest newest time over the partitions (one
    that has delivered nothing yet counts at the trace's start)."""
    latest = dict.fromkeys(parts, min(t for _, t in out))
    worst = 0.0
    for tp, t in out:
        latest[tp] = max(t, latest[tp])
        worst = max(worst, t - min(latest.values()))
    return worst


def test_backlog_is_read_within_the_bound_and_without_it_partition_after_partition() -> None:
    logs = {tp: [float(t) for t in range(0, 600, 10)] for tp in (A, B, C)}  # 600 s, a sample every 10 s
    aligned = drive(Aligner(30.0, times), FakeConsumer(logs, fetch=1000))
    free = drive(Aligner(math.inf, times), FakeConsumer(logs, fetch=1000))
    assert sorted(aligned) == sorted(free) == sorted((tp, t) for tp, ts in logs.items() for t in ts)
    for tp in logs:  # each partition in its own order
        assert [t for p, t in aligned if p == tp] == logs[tp]
    # the others' latest is one sample (10 s) behind their head while a slice of 30 s goes through
    assert max_skew(aligned, list(logs)) <= 30.0 + 10.0
    assert max_skew(free, list(logs)) >= 590.0


def test_partition_ahead_is_paused_and_resumed_when_the_others_catch_up() -> None:
    logs = {A: [float(t) for t in range(0, 100)], B: [float(t) for t in range(0, 100)]}
    consumer = FakeConsumer(logs, fetch=1000)
    out = drive(Aligner(5.0, times), consumer)
    assert ("pause", A) in consumer.calls and ("resume", A) in consumer.calls
    assert consumer.calls.index(("pause", A)) < consumer.calls.index(("resume", A))
    assert consumer.paused == set()  # nothing left paused at the end
    assert max_skew(out, [A, B]) <= 5.0 + 1.0


def test_under_the_hold_bound_a_partition_ahead_is_held_without_pausing() -> None:
    """librdkafka drops what it prefetched for a paused partition and fetches it again on resume:
    while what is held stays under ``hold`` nothing is paused, and the order is the same."""
    logs = {tp: [float(t) for t in range(0, 600, 10)] for tp in (A, B, C)}
    consumer, held = FakeConsumer(logs, fetch=1000), list[int]()
    out = drive(Aligner(30.0, times, hold=1000), consumer, held=held)
    assert consumer.calls == []
    assert 0 < max(held) <= 1000  # messages were held, under the bound
    assert sorted(out) == sorted((tp, t) for tp, ts in logs.items() for t in ts)
    for tp in logs:
        assert [t for p, t in out if p == tp] == logs[tp]
    assert max_skew(out, list(logs)) <= 30.0 + 10.0


def test_beyond_the_hold_bound_partitions_are_paused_until_half_of_it_is_through() -> None:
    """What is held stays within the bound plus one fetch per partition, and a paused partition is
    resumed only once the held messages are down to half the bound: fewer pause/resume round trips
    than pausing at once, for the same order."""
    logs = {tp: [float(t) for t in range(0, 6000, 10)] for tp in (A, B, C)}
    flips, outs = {}, {}
    for hold in (0, 100):
        consumer, held = FakeConsumer(logs, fetch=20), list[int]()
        al: Aligner = Aligner(30.0, times, hold=hold)
        outs[hold] = drive(al, consumer, rounds=5000, held=held)
        flips[hold] = sum(1 for c, _ in consumer.calls if c == "pause")
        assert al.held == 0 and consumer.paused == set()
        if hold:
            assert max(held) <= hold + 3 * 20 and max(held) > hold  # the bound was reached
            resumes = [i for i, (c, _) in enumerate(consumer.calls) if c == "resume"]
            assert resumes  # and its partitions came back
    for out in outs.values():
        assert sorted(out) == sorted((tp, t) for tp, ts in logs.items() for t in ts)
        assert max_skew(out, list(logs)) <= 30.0 + 10.0
    assert 0 < flips[100] < flips[0] / 2


def test_held_size_follows_route_release_and_revoke() -> None:
    al: Aligner = Aligner(10.0, times, hold=6, size=lambda ms: np.full(len(ms), 3, dtype=np.int64))
    al.assign([A, B], 0.0)
    assert al.route(A, [0.0, 50.0, 100.0, 150.0], NOW) == [] and al.route(B, [0.0, 1.0], NOW) == []
    assert al.held == 18
    assert al.release(0.1) == [(A, [0.0]), (B, [0.0, 1.0])]
    al.seen(A, 0.0)
    al.seen(B, 1.0)
    assert al.held == 9  # A's 50, 100, 150: over the bound of 6
    assert al.changes(0.1) == ([A], [])
    assert al.route(B, [45.0], 0.1) == [] and al.held == 12
    assert al.release(0.2) == [(A, [50.0]), (B, [45.0])] and al.held == 6
    al.seen(A, 50.0)
    al.seen(B, 45.0)
    assert al.changes(0.2) == ([], [])  # 6: within the bound but over half of it, A stays paused
    assert al.route(B, [95.0], 0.2) == [] and al.release(0.3) == [(A, [100.0]), (B, [95.0])]
    al.seen(A, 100.0)
    al.seen(B, 95.0)
    assert al.held == 3 and al.changes(0.3) == ([], [A])  # down to half: resumed, though it holds 150
    assert al.revoke([A]) == [] and al.held == 0


def test_partition_at_its_end_does_not_hold_the_others() -> None:
    al: Aligner = Aligner(10.0, times)
    al.assign([A, B], 0.0)
    al.at_end(B)  # empty partition
    assert al.route(A, [0.0, 50.0, 100.0], NOW) == []  # first data: held until its times are known
    assert al.release(0.1) == [(A, [0.0, 50.0, 100.0])]
    al.seen(A, 100.0)
    assert al.changes(0.1) == ([], [])
    # new data on B: it holds A back again (A is ahead of B's 20 by more than 10 s)
    assert al.route(B, [20.0], NOW) == []
    assert al.release(0.2) == [(B, [20.0])]
    al.seen(B, 20.0)
    assert al.changes(0.2) == ([A], [])
    assert al.route(A, [101.0], NOW) == []  # A is held while ahead
    assert al.release(0.3) == []


def test_new_partition_holds_the_others_at_most_idle_time() -> None:
    al: Aligner = Aligner(10.0, times, idle_s=1.0)
    al.assign([A, B], 0.0)
    assert al.route(A, [0.0, 100.0], NOW) == []
    assert al.release(0.5) == []  # B may still deliver older data
    assert al.changes(0.5) == ([A], [])
    assert al.pending
    assert al.release(1.5) == [(A, [0.0, 100.0])]  # B idle too long: it no longer counts
    al.seen(A, 100.0)
    assert al.changes(1.5) == ([], [A])


def test_revoked_partition_is_forgotten_and_its_pause_returned() -> None:
    al: Aligner = Aligner(10.0, times)
    al.assign([A, B], 0.0)
    al.route(A, [0.0, 100.0], NOW)
    al.route(B, [0.0], NOW)
    assert al.release(0.1) == [(A, [0.0]), (B, [0.0])]
    assert al.changes(0.1) == ([A], [])  # A holds 100.0
    assert al.revoke([A]) == [A]
    assert not al.pending and al.paused == set()
    assert al.revoke([B]) == []
    assert al.assigned() == set()
    al.assign([A], 1.0)  # reassigned: starts afresh
    assert al.route(A, [5.0], NOW) == [] and al.release(1.1) == [(A, [5.0])]


def test_batch_within_the_bound_goes_straight_through_and_inf_turns_it_off() -> None:
    al: Aligner = Aligner(10.0, times)
    al.assign([A], 0.0)
    al.route(A, [0.0], NOW)
    al.release(0.1)
    al.seen(A, 0.0)
    al.changes(0.1)
    assert al.route(A, [1.0, 2.0] * 50, NOW) == [1.0, 2.0] * 50  # its last message is within the bound
    assert al.route(A, [3.0, 11.0], NOW) == []  # beyond: held, to be cut by event time
    assert al.release(0.2) == [(A, [3.0, 11.0])]  # A is alone: nothing to wait for
    off: Aligner = Aligner(math.inf, times)
    off.assign([A, B], 0.0)
    assert off.route(A, [0.0, 1000.0], NOW) == [0.0, 1000.0]
    assert off.release(0.1) == [] and off.changes(0.1) == ([], []) and not off.enabled


def test_event_times_of_sample_messages() -> None:
    rows = Batch.from_columns(ts=[5.0, 7.0], nodes=["a", "b"], metrics=["cpu"], values=[[1.0], [2.0]])
    values = [*encode_batch(rows), b"not json"]
    assert event_times(values, "json").tolist() == [5.0, 7.0, -math.inf]


def test_event_times_read_from_the_leading_ts_are_the_decoders() -> None:
    """A JSON sample that starts with its ts is timed from that number without a decode: the same
    times as decoding every message (a time the decoder refuses, another shape, a frame, a
    non-JSON number such as 1_0 or an overflow go through the decoder)."""
    from perfsift.schemas import decode_samples
    from perfsift.schemas.frames import encode_frames

    rows = Batch.from_columns(
        ts=[5.25, 0.1 + 0.2, 1.7e9 + 1 / 3], nodes=["a", "b", "a"], metrics=["x"], values=[[1.0], [2.0], [3.0]]
    )
    values = [
        *encode_batch(rows),
        *encode_frames(rows, "job")[0],
        b'{"ts":1e400,"node":"a","metrics":{}}',
        b'{"node":"a","ts":3.0,"metrics":{}}',
        b'{"ts":1_0,"node":"a","metrics":{}}',
        b'{"ts":-0.0,"node":"a","metrics":{"x":1.0}}',
        b'{"ts":12.5e-1,"node":"a","metrics":{"x":1.0}}',
        b"not json",
        None,
    ]
    batch, kept, _ = decode_samples(values, None, "json")
    decoded = np.full(len(values), -math.inf)
    np.maximum.at(decoded, np.asarray(kept), batch.ts)
    got = event_times(values, "json")
    assert got.tolist() == decoded.tolist()
    assert got[:3].tolist() == rows.ts.tolist() and got[3] == rows.ts.max() and got[-3] == 1.25


def test_event_times_of_an_encoding_without_a_fast_path_are_its_decoders() -> None:
    from perfsift.schemas.encodings import encoding_for

    avro = encoding_for("avro")
    rows = Batch.from_columns(ts=[5.5, 7.0], nodes=["a", "b"], metrics=["cpu"], values=[[1.0], [2.0]])
    values = [*avro.encode_batch(rows), b"not avro", None]
    assert avro.event_times(values).tolist() == [5.5, 7.0, -math.inf, -math.inf]
    assert event_times(values, "avro").tolist() == avro.event_times(values).tolist()
    assert avro.event_times([]).tolist() == []


def test_end_reported_while_holding_counts_once_the_held_messages_are_through() -> None:
    al: Aligner = Aligner(10.0, times)
    al.assign([A, B], 0.0)
    assert al.route(A, [0.0, 100.0], NOW) == [] and al.route(B, [0.0, 5.0], NOW) == []
    al.at_end(A)  # A's end came in the same batch, after its messages
    al.at_end(B)
    assert al.release(0.1) == [(A, [0.0]), (B, [0.0, 5.0])]
    assert al.changes(0.1) == ([A], [])
    assert al.busy  # A still holds 100.0
    assert al.release(0.2) == [(A, [100.0])]  # B is at its end: it holds nothing back
    al.seen(A, 100.0)
    assert al.changes(0.2) == ([], [A]) and not al.pending


def test_partition_quiet_without_an_end_stops_holding_the_others_after_idle_time() -> None:
    al: Aligner = Aligner(10.0, times, idle_s=1.0)
    al.assign([A, B], 0.0)
    al.route(A, [0.0], 0.1)
    al.route(B, [0.0, 100.0], 0.1)
    assert al.release(0.2) == [(A, [0.0]), (B, [0.0])]
    al.seen(A, 0.0)
    al.seen(B, 0.0)
    assert al.changes(0.2) == ([B], [])  # B holds 100.0 while A (no end reported) may deliver more
    assert al.release(0.9) == []
    assert al.release(1.2) == [(B, [100.0])]  # A quiet for 1.1 s: it no longer holds B back
    al.seen(B, 100.0)
    assert al.changes(1.2) == ([], [B])
    assert al.route(A, [1.0], 1.3) == [1.0]  # A delivers again: within the bound, straight through
    al.seen(A, 1.0)
    assert al.changes(1.3) == ([B], [])  # and B, 99 s ahead, waits for it again
