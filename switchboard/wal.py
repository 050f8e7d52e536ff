"""SQLite's write-ahead log copied into the database file, and started over, outside the writers'
COMMITs (issue 11).

SQLite appends every committed page to the WAL; a *checkpoint* copies the log into the database
file, and the log starts over from its beginning once everything in it is copied. SQLite's own
checkpoint (``wal_autocheckpoint``, :data:`WAL_AUTOCHECKPOINT_PAGES` pages, about 40 MB) runs
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
since the unlocked pass are copied, and the log starts over at once (or, if a reader still reads
the log, the next writer starts it over). The writers wait for that short checkpoint instead of
one of them making a long one: ``bench/ingest.py --requests 6000 --runs 1`` alternated with the
code before, four pairs, embedded ack p99 28.1, 29.6, 24.6 and 27.7 ms against 47.1, 40.3, 40.8
and 40.5 ms; the ack path only 12.7-20.0 ms against 16.6-21.7 ms.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading

from switchboard.config import sqlite_uri

log = logging.getLogger(__name__)

WAL_AUTOCHECKPOINT_PAGES = 10_000
"""SQLite's own checkpoint, in a writer's COMMIT, every this many 4 KiB pages of log (about 40 MB):
the backstop, and the only checkpoint of short-lived CLI processes."""
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
"""The log file is cut back to this size when it starts over (``journal_size_limit``)."""
CHECKPOINT_INTERVAL_SECONDS = 0.25
"""How often a long-running process's :class:`WalCheckpointer` copies the WAL into the database
file (a passive checkpoint; nothing to do costs a few microseconds)."""
RESTART_FRAMES = 2_000
"""A pass that finds at least this many frames (4 KiB pages) in the log starts it over under the
writers' lock (about 8 MB, a fifth of SQLite's own threshold; at full ingest the log grows by
about 12,000 frames a second). Each restart holds the writers 0.1 ms when nothing was committed
since the last copy and 3-20 ms otherwise (the last frames copied, the log and the file fsynced);
with ``bench/ingest.py`` at 1,000, 2,000 and 5,000 frames (three runs each, alternated) the ack
p99 did not differ beyond the run-to-run noise; the restarts held the writers 360-440 ms per run
in all at 1,000 and 2,000, 150-260 ms at 5,000, which comes closer to SQLite's own threshold."""


class WalCheckpointer:
    """Copies SQLite's write-ahead log into the database file from a background thread, and
    starts the log over (see the module docstring).

    Each pass runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own, which waits for
    no reader or writer and holds no write lock (SQLite releases the interpreter lock while it
    copies). When the log then holds at least ``restart_frames`` frames and ``lock_path`` is
    given, it takes that ``flock`` (blocking, as a writer does) and runs
    ``PRAGMA wal_checkpoint(RESTART)`` under it. The connection never waits on SQLite's locks
    (timeout 0): a checkpoint already running in another process is skipped, and so is a restart
    while a reader still reads the log (the next pass tries again).

    Args:
        path: the database file.
        interval: seconds between passes.
        lock_path: the writers' lock file (``<database>-writer.lock``); ``None``: passive passes only.
        restart_frames: log size, in frames, from which a pass starts the log over.

    Attributes:
        checkpoints: passes whose totals (frames in the log, frames copied) changed and
            copied something: about the checkpoints that did work (a pass over a log already
            copied does not count; two passes with equal totals around a restart count once).
        passes: passes completed, whether or not they copied anything (a pass that began after
            a COMMIT and no reader holds an older snapshot has copied that COMMIT's frames).
        restarts: passes that ran the checkpoint under the writers' lock and left the log empty.
    """

    def __init__(self, path: str, interval: float = CHECKPOINT_INTERVAL_SECONDS, lock_path: str | None = None,
                 restart_frames: int = RESTART_FRAMES) -> None:
        self.path, self.interval = path, interval
        self.lock_path, self.restart_frames = lock_path, restart_frames
        self.checkpoints = self.passes = self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switchboard-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        failed, last = False, (0, 0)
        try:
            while not self._stop.wait(self.interval):
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
                        # Not in WAL mode as this connection saw the file: opened before the
                        # migrations turned WAL on, it would never look again. Reconnect next pass.
                        conn.close()
                        conn = None
                        continue
                    # (frames in the log, frames copied so far): the same pair again copied nothing.
                    if copied > 0 and not busy and (frames, copied) != last:
                        self.checkpoints += 1
                        last = (frames, copied)
                    if frames >= self.restart_frames and self.lock_path is not None and not self._stop.is_set():
                        # Once more without the lock first: it copies what was committed during
                        # the pass above, so less is left to copy (and fsync) with writers waiting.
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        self._restart(conn)
                    self.passes += 1
                    failed = False
                except sqlite3.Error as exc:
                    if not failed:  # once per failure streak; the in-COMMIT backstop still runs
                        log.warning("background WAL checkpoint failed: %s", exc)
                    failed = True
        finally:
            if conn is not None:
                conn.close()

    def _restart(self, conn: sqlite3.Connection) -> None:
        """The checkpoint that starts the log over, under the writers' lock file."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)  # type: ignore[arg-type]
        except OSError:
            return  # a read-only folder: the writers have no lock file either
        try:
            # A descriptor of its own: flock locks belong to the open file, so this one waits for
            # this process's writers too.
            fcntl.flock(fd, fcntl.LOCK_EX)
            busy, frames, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            if not busy:
                self.restarts += 1
                log.debug("WAL started over after %d frames", frames)
        finally:
            os.close(fd)  # gives the lock back

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread (waits up to ``timeout`` seconds for a checkpoint under way)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
