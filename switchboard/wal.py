"""SQLite's write-ahead log copied into the database file, and started over, outside the writers'
COMMITs (issue 11).

SQLite appends every committed page to the WAL; a *checkpoint* copies the log into the database
file, and the log starts over from its beginning once everything in it is copied. SQLite's own
checkpoint (``wal_autocheckpoint``, 10,000 pages then, about 40 MB) runs
inside the COMMIT of whichever writer crossed the threshold, under the writer lock: copying and
fsyncing there stopped every writer at once. :class:`WalCheckpointer` runs checkpoints in a
background thread of ``serve``, its processing process and ``switchboard worker``.

A checkpoint made beside the writers copies the log but does not start it over. Only a writer
starts the log over, at its first write, and only when the log was copied in full before its
transaction began (SQLite's ``walRestartLog``: the writer's snapshot must not need the log).
Under a steady stream of commits the log always holds a newer commit than the last pass copied,
so it started over only after SQLite's own checkpoint at 40 MB, in a COMMIT: at 1,000 deliveries
a second that was every 0.7-1 s, a COMMIT spending 15-35 ms of CPU (``time.thread_time``) with
every writer waiting, and the ack p99 of ``bench/ingest.py`` 40-50 ms against a p50 of 10-15 ms.
So once the log holds :data:`RESTART_FRAMES` frames, a pass takes the writers' lock file (the
``flock`` of :meth:`switchboard.db.Database.flocked`, waiting its turn as a writer does) and runs
``PRAGMA wal_checkpoint(RESTART)`` under it: no writer appends meanwhile, the few frames written
since the unlocked pass are copied, and the next writer, whose transaction begins on a log
copied in full, starts it over (unless a reader that began earlier still reads the log; the
next locked pass tries again). The writers wait for that short checkpoint instead of one of them
making a long one: ``bench/ingest.py --requests 6000 --runs 1`` alternated with the code before,
three pairs, embedded ack p99 20.4, 27.4 and 24.2 ms against 47.3, 38.9 and 48.7 ms; the ack path
only 16.7-20.7 ms against 18.7-24.4 ms.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading

from switchboard.config import sqlite_uri

log = logging.getLogger(__name__)

WAL_AUTOCHECKPOINT_PAGES = 64_000
"""SQLite's own checkpoint, in a writer's COMMIT, every this many 4 KiB pages of log (about 250 MB):
the backstop, and the only checkpoint of short-lived CLI processes. Twice the growth past which a
:class:`WalCheckpointer` hurries its next pass (:data:`PASS_FRAMES`), so that at the rates
measured it does not run in ``serve``. Not a bound: a log that grows by more than about 64,000
frames within one whole interval (the first pass after a quiet spell waits all of it), or a
restart that a reader holds up for several passes, can still reach it."""
WAL_SIZE_LIMIT_BYTES = 256 * 1024 * 1024
"""The log file is cut back to this size when it starts over (``journal_size_limit``), by the
first writer's COMMIT after the restart, under the writers' lock. Above what the log reaches
between two restarts at full ingest (about 125 MB, a second of it), so that it is not cut back
and grown again every second: at 64 MB the cut took 8-18 ms in a COMMIT about once a second
(``strace`` of ``bench/ingest.py``, issue 11; a review of 60e8a04)."""
CHECKPOINT_INTERVAL_SECONDS = 1.0
"""How often a long-running process's :class:`WalCheckpointer` copies the WAL into the database
file (a passive checkpoint; nothing to do costs a few microseconds), unless the log grows faster
than :data:`PASS_FRAMES` a pass. A pass copies the newest version of each page once, however often
it was rewritten since the previous pass, and at full ingest each pass ends in a locked one
(:data:`RESTART_FRAMES`) that holds the writers: fewer, longer-spaced passes copy less and stop
the writers less often. Issue 11, measured on 2026-12-07 (``bench/ingest.py``'s ack path, the log
growing by about 25,000 frames a second): 0.25 s with :data:`RESTART_FRAMES` 2,000 held the
writers 180-250 ms in 32-33 locked passes over ten rounds, 1 s with 8,000 held them 53-60 ms in
12-13; the ack path acked at 61.5 % of the bare route against 58.7 % (12 rounds of 3,300
requests, alternated), and at 58.1 % against 55.5 % under sustained load (8 rounds of 20,000,
every round won; docs/PERFORMANCE.md)."""
PASS_FRAMES = 32_000
"""When the log grew by more than this many frames (about 125 MB) since the previous pass, the next
pass comes sooner, in proportion (never sooner than :data:`MIN_INTERVAL_SECONDS`): on a machine
that writes faster than this one the log stays far from SQLite's own threshold
(:data:`WAL_AUTOCHECKPOINT_PAGES`)."""
MIN_INTERVAL_SECONDS = 0.1
"""The shortest wait between two passes of a :class:`WalCheckpointer` (see :data:`PASS_FRAMES`)."""
RESTART_FRAMES = 8_000
"""A pass that finds at least this many frames (4 KiB pages, about 32 MB) in the log copies the
rest under the writers' lock, so that the next writer starts the log over. Each locked pass holds
the writers 0.1 ms when nothing was committed since the unlocked copy and up to about 25 ms
otherwise (the last frames copied, the log and the file fsynced; 0.01-5.9 ms, 4.5 ms on average,
over 12 locked passes of a ``bench/ingest.py`` A/B on 2026-12-07, up to 22.8 ms in a review's). Below it, an idle or slow instance's log is
left to grow until a later pass (at 2,000 and a 0.25 s pass, issue 11's earlier choice, the
ack path stopped for a locked pass three to four times a second at full ingest; see
:data:`CHECKPOINT_INTERVAL_SECONDS`)."""
TAIL_FRAMES = 100
"""Before taking the lock, a pass copies again without it (up to three times) while each copy
finds more than this many new frames: each copy's fsyncs take milliseconds, during which the
writers append, and what remains is copied with the writers waiting. Held 5.4 ms on average
and 14 ms at most in a ``bench/ingest.py --requests 6000`` run, against 6-11 ms and 25-36 ms
with one extra copy."""


def next_wait(interval: float, grown: int, pass_frames: int = PASS_FRAMES) -> float:
    """Seconds until a :class:`WalCheckpointer`'s next pass: ``interval``, or less in proportion
    when the log grew by more than ``pass_frames`` frames since the previous pass, so that a pass
    finds about ``pass_frames`` new frames (never less than :data:`MIN_INTERVAL_SECONDS`, or
    ``interval`` if that is shorter)."""
    if grown <= pass_frames:
        return interval
    return max(interval * pass_frames / grown, min(interval, MIN_INTERVAL_SECONDS))


class WalCheckpointer:
    """Copies SQLite's write-ahead log into the database file from a background thread, and
    starts the log over (see the module docstring).

    Each pass runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own, which waits for
    no reader or writer and holds no write lock (SQLite releases the interpreter lock while it
    copies). When the log then holds at least ``restart_frames`` frames (and has grown or started
    over since the last locked pass) and ``lock_path`` is given, it copies again (see
    :data:`TAIL_FRAMES`), then takes that ``flock`` (blocking, as a writer does) and runs
    ``PRAGMA wal_checkpoint(RESTART)`` under it. The connection never waits on SQLite's locks (timeout 0): a checkpoint already running in
    another process is skipped. A failure (``sqlite3.Error``, or ``OSError`` from the lock file)
    is logged once per streak and the next pass tries again.

    Args:
        path: the database file.
        interval: seconds between passes.
        lock_path: the writers' lock file (``<database>-writer.lock``); ``None``: passive passes only.
        restart_frames: log size, in frames, from which a pass copies under the lock.
        pass_frames: the log's growth between two passes, in frames, past which the next pass
            comes sooner (:func:`next_wait`).

    Attributes:
        checkpoints: passes whose totals (frames in the log, frames copied) changed and
            copied something: about the checkpoints that did work (a pass over a log already
            copied does not count; two passes with equal totals around a restart count once).
        passes: passes completed, whether or not they copied anything (a pass that began after
            a COMMIT and no reader holds an older snapshot has copied that COMMIT's frames).
        locked_passes: passes that copied the rest of the log under the writers' lock, in full
            (no reader still reading the log): the next writer starts the log over.
    """

    def __init__(self, path: str, interval: float = CHECKPOINT_INTERVAL_SECONDS, lock_path: str | None = None,
                 restart_frames: int = RESTART_FRAMES, pass_frames: int = PASS_FRAMES) -> None:
        self.path, self.interval = path, interval
        self.lock_path, self.restart_frames, self.pass_frames = lock_path, restart_frames, pass_frames
        self.checkpoints = self.passes = self.locked_passes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switchboard-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        failed, last, locked_at = False, (0, 0), -1
        wait, seen = self.interval, 0  # seen: the log's frames at the end of the previous pass
        try:
            while not self._stop.wait(wait):
                try:
                    if conn is None:
                        # Autocommit (no read transaction held between checkpoints), never waits,
                        # and never creates the file (mode=rw) if the instance was removed
                        # meanwhile. (An absolute path after "file://": a path starting "//" is no
                        # URI authority.)
                        conn = sqlite3.connect(sqlite_uri(self.path, "rw"), uri=True,
                                               timeout=0, isolation_level=None, check_same_thread=False)
                    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if frames == -1:
                        if not busy:
                            # Not in WAL mode as this connection saw the file: opened before the
                            # migrations turned WAL on, it would never look again. Reconnect.
                            conn.close()
                            conn = None
                        # (1, -1, -1): another connection is checkpointing; skip this pass.
                        continue
                    # (frames in the log, frames copied so far): the same pair again copied nothing.
                    if copied > 0 and not busy and (frames, copied) != last:
                        self.checkpoints += 1
                        last = (frames, copied)
                    restarted = False
                    # Not again over a log that neither grew nor started over since the last
                    # locked pass (an idle database: only a writer starts the log over).
                    if (frames >= self.restart_frames and frames != locked_at and self.lock_path is not None
                            and not self._stop.is_set()):
                        # Again without the lock first, while each pass still finds more than
                        # TAIL_FRAMES new frames (committed during the previous one, whose fsyncs
                        # take milliseconds): what is left to copy with the writers waiting is
                        # then only what arrived during the last one.
                        for _ in range(3):
                            before = frames
                            _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                            if frames - before <= TAIL_FRAMES:
                                break
                        frames, restarted = self._copy_under_lock(conn, frames)
                        locked_at = frames
                    # A log shorter than the last pass saw has started over: all of it is new.
                    wait = next_wait(self.interval, frames - seen if frames >= seen else frames, self.pass_frames)
                    # Copied in full under the lock: the next writer starts the log over, and all
                    # of the log the next pass finds is new. A restart that a reader held up
                    # (busy) leaves the log as it was: its frames are not new growth, and hurrying
                    # would only take the writers' lock again to no avail.
                    seen = 0 if restarted else frames
                    self.passes += 1
                    failed = False
                except (sqlite3.Error, OSError) as exc:
                    if not failed:  # once per failure streak; the in-COMMIT backstop still runs
                        log.warning("background WAL checkpoint failed: %s", exc)
                    failed = True
                    wait = self.interval  # a failure streak is not retried at a hurried pace
        finally:
            if conn is not None:
                conn.close()

    def _copy_under_lock(self, conn: sqlite3.Connection, frames: int) -> tuple[int, bool]:
        """Copy the rest of the log with the writers' lock file held (no writer appends
        meanwhile), so that the next writer starts the log over. Returns the log's frames as
        seen under the lock (``frames`` when the lock file is missing) and whether it was copied
        in full (not when a reader still reads it: counted in :attr:`locked_passes`)."""
        try:
            # O_RDWR without O_CREAT: a removed instance's folder gets no new lock file.
            fd = os.open(self.lock_path, os.O_RDWR)  # type: ignore[arg-type]
        except OSError:
            return frames, False  # a read-only folder or a removed instance: the writers have none either
        try:
            # A descriptor of its own: flock locks belong to the open file, so this one waits for
            # this process's writers too.
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)  # before close: a forked child shares the open file
            restarted = not busy and frames == copied
            if restarted:
                self.locked_passes += 1
            return int(frames), restarted
        finally:
            os.close(fd)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread (waits up to ``timeout`` seconds for a checkpoint under way)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
