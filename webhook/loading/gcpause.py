"""Python's cyclic garbage collector kept off while a large document is alive.

Reading a review of a few MiB makes up to millions of containers. Each few hundred new
containers trigger a collection, and collections of the older generations walk all of them
again: a review of a million small lists took ten times as long to read with the collector
on, and the first collection after it walked them all once more, holding the GIL for a
third of a second against every other review. These containers are acyclic and freed by
reference counting when the review is answered; the collector has nothing to find in them.
So the collector is off from reading a large review until its objects are gone. Threads
that do so at once share one pause, counted.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pause:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    def enter(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._was_enabled:
                gc.enable()


_PAUSE = _Pause()


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block; objects made in it should be gone by its end."""
    _PAUSE.enter()
    try:
        yield
    finally:
        _PAUSE.leave()
