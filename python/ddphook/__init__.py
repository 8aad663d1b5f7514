"""ddphook from Python: the job (an INI file) of a process and its
communicator, over libddphook's C API.

    import ddphook
    job = ddphook.open_job("job.ini")   # every rank, under mpiexec
    job.rank, job.world_size

ddphook.torch registers a job's hook as a PyTorch DDP communication hook
(docs/usage.md, "PyTorch").  Every failure raises ddphook.Error, whose
message is the runtime's (file and line, plugin and symbol, bucket and
rank)."""
import atexit
import ctypes
import os
import re
import sys
import tempfile
import threading

from . import _capi

__all__ = ["Error", "Job", "open_job", "current_job"]


class Error(RuntimeError):
    """A ddphook failure: `status` is the symbolic name (DDPH_ERR_...)."""

    def __init__(self, message, status="DDPH_ERR_HOOK"):
        super().__init__(message)
        self.status = status


_lib = None
_lib_lock = threading.Lock()


def lib():
    """libddphook through ctypes (loaded once)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _capi.load()
        return _lib


def status_name(st):
    return lib().ddph_status_name(st).decode()


_ERROR_LINE = re.compile(r"^ddphook(\[rank \d+\])?: error: (.*)$")


def _open_capturing_stderr(path):
    """ddph_open, whose messages go to stderr only: they are copied there
    as usual and the first error line is returned for the exception."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        ctx = ctypes.c_void_p()
        try:
            st = lib().ddph_open(path.encode() if path else None, None, None,
                                 ctypes.byref(ctx))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    sys.stderr.write(text)
    sys.stderr.flush()
    errors = [m.group(2) for m in map(_ERROR_LINE.match, text.splitlines())
              if m]
    return st, ctx, errors[0] if errors else ""


class Job:
    """One ddphook job: the INI file's configuration, MPI (initialised
    here unless the program did it), the plugin path and the
    communication threads.  One per process at a time (open_job); closed
    at exit."""

    opened = 0  # jobs this process has opened (every rank alike)

    def __init__(self, ini_path):
        self.path = os.path.abspath(ini_path) if ini_path else None
        st, ctx, message = _open_capturing_stderr(self.path)
        if st != 0:
            raise Error("ddphook: cannot open the job %s: %s: %s" % (
                self.path or "(defaults)", status_name(st),
                message or lib().ddph_strerror(st).decode()),
                status_name(st))
        self.ctx = ctx
        # This job's number in the process: what tells its keys in the
        # script's store from an earlier job's (ddphook.torch).
        self.number = Job.opened
        Job.opened += 1
        self.closed = False
        self.failed = None  # the message of the failure that ended the job
        self.step_to_end = None  # ddphook.torch: whose step awaits its end
        # Collective work the job owes before it closes (ddphook.torch's
        # deferred state saves): run by close() on a healthy job.
        self.before_close = []

    @property
    def rank(self):
        return lib().ddph_rank(self.ctx)

    @property
    def world_size(self):
        return lib().ddph_world_size(self.ctx)

    def last_error(self):
        return lib().ddph_last_error(self.ctx).decode(errors="replace")

    def check(self, st, what):
        """Raises Error for a failed call (st != 0) with the runtime's
        message; the job is then over (self.failed)."""
        if st == 0:
            return
        message = self.last_error() or lib().ddph_strerror(st).decode()
        if self.failed is None:
            self.failed = message
        raise Error("ddphook: %s: %s" % (what, message), status_name(st))

    def barrier(self):
        self._usable()
        self.check(lib().ddph_barrier(self.ctx), "barrier")

    def average(self, values):
        """A list of floats averaged over the ranks (a loss)."""
        self._usable()
        arr = (ctypes.c_double * len(values))(*values)
        self.check(lib().ddph_allreduce_f64(self.ctx, arr, len(values),
                                            _capi.SUM), "average")
        return [v / self.world_size for v in arr]

    def broadcast_bytes(self, data, size, root=0):
        """`size` bytes from rank `root` (data: bytes there, ignored
        elsewhere) to every rank."""
        self._usable()
        buf = ctypes.create_string_buffer(size)
        if self.rank == root:
            buf.raw = data.ljust(size, b"\0")[:size]
        self.check(lib().ddph_broadcast(self.ctx, buf, size, root),
                   "broadcast")
        return buf.raw

    def _usable(self):
        """Refuses a closed job; ends a step ddphook.torch left open."""
        if self.closed:
            raise Error("ddphook: the job %s is closed" % self.path,
                        "DDPH_ERR_STATE")
        if self.step_to_end is not None:
            self.step_to_end.step_end()

    def abort(self, reason):
        """Fails the job on every rank, naming this rank and `reason` (the
        peers hear it within about a second); close() then raises."""
        if self.closed:
            return
        if self.failed is None:
            self.failed = reason
        lib().ddph_abort(self.ctx, reason.encode(errors="replace"))

    def close(self):
        """Ends the job (every rank meets, within timeout_s): first what
        the job owes (ddphook.torch's deferred state saves), then
        ddph_close.  Raises Error when the job had failed; the process then
        exits non-zero (see _close_at_exit).  Idempotent."""
        if self.closed:
            return
        owed_error = None
        while self.failed is None and self.before_close:
            try:
                self.before_close.pop(0)()
            except Error as e:
                owed_error = owed_error or e
        self.closed = True
        st = lib().ddph_close(self.ctx)
        if st != 0 or owed_error is not None:
            global _failed
            _failed = self.failed or (str(owed_error) if owed_error
                                      else status_name(st))
            raise Error("ddphook: the job failed: %s" % _failed,
                status_name(st) if st != 0 else owed_error.status)


_job = None
_failed = None  # the failure of a job this process closed, if any


def open_job(ini_path):
    """The process's job, opened on first call (collective: every rank
    calls it).  A later call must name the same file."""
    global _job
    if _job is None or _job.closed:
        if _job is None:
            atexit.register(_close_at_exit)
        _job = Job(ini_path)
        return _job
    want = os.path.abspath(ini_path) if ini_path else None
    if want != _job.path:
        raise Error("ddphook: this process runs the job %s already; one job "
                    "per process (asked for %s)" % (_job.path, want),
                    "DDPH_ERR_STATE")
    return _job


def current_job():
    """The job open_job opened, or None."""
    return _job if _job is not None and not _job.closed else None


def _uncaught_reason():
    """Why the script is ending, when an uncaught exception ends it
    (Python keeps it in sys.last_type before the atexit functions run)."""
    kind = getattr(sys, "last_type", None)
    if kind is None:
        return None
    if issubclass(kind, KeyboardInterrupt):
        return "interrupted (SIGINT: KeyboardInterrupt)"
    return ("its script ended with an uncaught %s: %s" % (
        kind.__name__, getattr(sys, "last_value", "")))[:200]


def _close_at_exit():
    """The job's end when the script did not close it, and the process's
    exit status: never 0 after a job this process ran has failed (also
    one closed earlier, say by a hook call that failed, whose exception
    the script caught)."""
    job = current_job()
    if job is not None:
        reason = _uncaught_reason()
        if reason is not None:
            # The peers learn that this rank is gone and why, rather than
            # that it closed the job under them.
            job.abort(reason)
        try:
            job.close()
        except Error:
            pass  # the runtime said why on stderr
    if _failed is not None:
        # MPI is left unfinalized on a failed job: the process ends now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
