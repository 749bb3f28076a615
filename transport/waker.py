"""A thread's wake-up descriptor: lets one thread wake another that sleeps in ``poll`` on a socket."""

from __future__ import annotations

import os
import select
import threading


class Waker:
    """An eventfd (a pipe where there is none) owned by one thread: readable once another thread called
    ``wake``, until ``clear``.

    A thread waiting for input on an endpoint (:meth:`transport.endpoints.ZmqEndpoint.receive_here`) also polls its
    waker, so another thread can wake it when what it waits for happened elsewhere: its call was settled by the
    loop, a job was queued for it, or a message arrived that only it is there to read."""

    _local = threading.local()

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        if hasattr(os, "eventfd"):
            self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._write_fd = self.fd
        else:  # pragma: no cover - non-Linux
            self.fd, self._write_fd = os.pipe()
            os.set_blocking(self.fd, False)
            os.set_blocking(self._write_fd, False)
        self._pollers: dict[int, select.poll] = {}

    def __del__(self) -> None:  # the thread ended (its thread-local went away) and nobody holds the waker
        for fd in {self.fd, self._write_fd}:
            try:
                os.close(fd)
            except OSError:
                pass

    @classmethod
    def for_this_thread(cls) -> Waker:
        """The calling thread's waker (made on first use, kept for the thread's life)."""
        waker = getattr(cls._local, "waker", None)
        if waker is None:
            waker = cls._local.waker = cls()
        return waker

    def poller(self, fd: int) -> select.poll:
        """A poll object watching ``fd`` and this waker for input (kept: waiting again makes no new one)."""
        poller = self._pollers.get(fd)
        if poller is None:
            poller = self._pollers[fd] = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(self.fd, select.POLLIN)
        return poller

    def wake(self, *_: object) -> None:
        """Make ``fd`` readable, unless called by the owning thread itself (it is awake: nothing to do).
        Usable as a callback: extra arguments are ignored."""
        if threading.get_ident() == self.owner:
            return
        try:
            os.write(self._write_fd, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except BlockingIOError:  # already awake: the counter or pipe is full
            pass

    def clear(self) -> None:
        try:
            os.read(self.fd, 4096)
        except BlockingIOError:
            pass
