"""How many of numba's threads the compiled NWS kernel runs a call on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

#: values per kernel call from which the compiled kernel runs its series on numba's threads. A
#: smaller call runs on the calling thread alone: waking the OpenMP workers, and their spinning after
#: each call, cost more CPU than they saved. Measured under load on 2 cores, 440 calls of 128 values
#: (a select stage's forecasts of its kept metrics): 3.5 CPU-s on 2 threads, 0.4 CPU-s on one;
#: 10 calls of 7,680 and of 76,800 values: the same CPU on one thread as on two.
PARALLEL_FROM = 20_000


@contextmanager
def kernel_threads(items: int) -> Iterator[None]:
    """numba's thread count, for the calling thread, during a kernel call of ``items`` values: 1
    below :data:`PARALLEL_FROM`, else unchanged (the results do not depend on it: every series is
    stepped by one thread, in arrival order).

    >>> import numba
    >>> with kernel_threads(10):
    ...     numba.get_num_threads()
    1
    """
    import numba

    if items >= PARALLEL_FROM:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)
