"""The launcher's own code under guard: its failures and its time.

loom.torch runs the launcher's functions (model, parallelize, inputs, optimizer,
loss, train_step, train_context) and the model's own code inside its capture. A
Guard turns whatever that code does that is no verdict (an exception, sys.exit, an
interrupt, or running past the capture's timeout) into one LauncherError naming the
launcher's function, the launcher's line that was running and the exception's own
message; the verifier's process never exits or hangs for it. Failures of loom.torch's
own code pass through unchanged.
"""

import contextlib
import functools
import math
import os
import signal
import sys
import sysconfig
import threading
import time

import torch

from loom.torch.errors import CaptureError, LauncherError

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_LOOM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep

# Characters of an exception's message kept on the error line.
_MESSAGE_CHARS = 600


def _in_loom(path):
    return os.path.abspath(path).startswith(_LOOM_DIR)


def is_user_file(path):
    """Whether a frame's file is the user's code: the launcher, its neighbours, the
    model's package (transformers, ...), not torch, loom or Python's own library."""
    if path.startswith("<"):  # generated code (FX graphs), frozen modules
        return False
    path = os.path.abspath(path)
    if path.startswith((_TORCH_DIR, _LOOM_DIR)):
        return False
    if path.startswith(_STDLIB_DIR):
        return "site-packages" in path or "dist-packages" in path
    return True


def code_of(fn):
    """The code object the launcher's function `fn` runs (through decorators,
    functools.partial, bound methods and callable objects); None without one."""
    for _ in range(16):
        if fn is None:
            return None
        if getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        elif isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__code__", None) is not None:
            return fn.__code__
        elif getattr(fn, "__func__", None) is not None:
            fn = fn.__func__
        elif getattr(getattr(type(fn), "__call__", None), "__code__", None) is not None:
            fn = type(fn).__call__
        else:
            return None
    return None


def one_line(text, limit=_MESSAGE_CHARS):
    """A message on one line: its lines joined, at most `limit` characters."""
    text = " ".join(line.strip() for line in str(text).splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def exception_text(e):
    """"RuntimeError: message", on one line."""
    message = one_line(e)
    return f"{type(e).__name__}: {message}" if message else type(e).__name__


def _place(frame_line):
    from loom.torch.lower import short_path
    frame, line = frame_line
    return f"{short_path(frame.f_code.co_filename)}:{line}"


def _traceback_frames(tb):
    """(frame, line) of a traceback, outermost first."""
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


class _Timeout(BaseException):
    """The time of a Guard with a timeout is up. A BaseException, so that the
    launcher's own `except Exception` does not swallow it."""


# The guards whose blocks the main thread is running, outermost first (a timeout's
# place is read with what all of them know, and the innermost's stage).
_ACTIVE = []


def _main_thread():
    return threading.current_thread() is threading.main_thread()


class Guard:
    """A context manager around loom.torch's run of a launcher's code.

    functions: name -> the launcher's function ("model": build_model, ...), by which
        a failure is named; files: the launcher's files besides those functions' own
        (the launcher file itself); timeout: seconds the whole block may take (None:
        unbounded); subject: what failed where no launcher function was running;
        stuck: called with the LauncherError when the user's code keeps running
        three seconds past the timeout, swallowing it (a bare `except:` in a loop);
        a command ends its process there.
    `stage` says what loom.torch is doing ("tracing rank 0"); the error says it too.

    On leaving the block: an exception raised in the user's code (a launcher
    function or any frame outside torch, loom and Python's library on its way, and
    not raised by loom itself), a SystemExit or other BaseException from there, and
    the timeout raise LauncherError. CaptureError and loom's own failures pass.
    Guards nest: a timeout is the guard's that set it, named with what the guards
    inside it know (their functions, files and stage).
    """

    def __init__(self, functions=None, files=(), timeout=None, subject="the training step",
                 stuck=None):
        self.names = {}
        self.files = {os.path.abspath(f) for f in files}
        for name, fn in (functions or {}).items():
            code = code_of(fn)
            if code is not None:
                self.names.setdefault(code, name)
                self.files.add(os.path.abspath(code.co_filename))
        self.timeout = timeout
        self.subject = subject
        self.progress = None  # called with each stage's words as it starts
        self._stage = ""
        self._entry = None
        self._expired = None  # the LauncherError's words when the time ran out
        self._swallowed = 0
        self._saved = None
        self.stuck = stuck

    @property
    def stage(self):
        """What runs now, in words ("tracing rank 3"); setting it tells `progress`."""
        return self._stage

    @stage.setter
    def stage(self, what):
        self._stage = what
        if self.progress is not None and what:
            self.progress(what)

    # -- where the user's code was --

    def _locate(self, frames, guards=None):
        """(function, where, inner) of a stack's (frame, line) pairs, outermost
        first: the innermost launcher function running, the innermost line in the
        launcher's files, and the innermost line of the user's code where it is
        another (a helper the launcher calls, the model's forward). Without a
        launcher function, `where` names the function of its line too."""
        guards = guards or [self]
        names, files = {}, set()
        for g in guards:
            names.update(g.names)
            files |= g.files
        function = ""
        for frame, _ in frames:
            function = names.get(frame.f_code, function)
        launcher = next((fl for fl in reversed(frames)
                         if os.path.abspath(fl[0].f_code.co_filename) in files), None)
        user = next((fl for fl in reversed(frames) if is_user_file(fl[0].f_code.co_filename)),
                    None)
        where = ""
        if launcher or user:
            where = _place(launcher or user)
            code = (launcher or user)[0].f_code
            qualname = getattr(code, "co_qualname", code.co_name)
            if not function and not qualname.startswith("<"):
                where = f"{where} in {qualname}"
        inner = _place(user) if user is not None and launcher is not None and \
            user[0] is not launcher[0] else ""
        return function, where, inner

    def _message(self, function, where, inner, stage, verb, detail="", subject=None):
        subject = f"the launcher's {function}" if function else subject or self.subject
        text = f"{subject} {verb}"
        if where:
            text += f" at {where}"
        if inner:
            text += f", in {inner}"
        if stage:
            text += f" ({stage})"
        return text + (f": {detail}" if detail else "")

    # -- the timeout --

    def _alarm(self, signum, frame):
        frames = []
        while frame is not None and frame is not self._entry:
            frames.append((frame, frame.f_lineno))
            frame = frame.f_back
        frames.reverse()
        if self._expired is not None:
            # Raised before: raise again only while the user's code still runs (it
            # swallowed the first), not while the stack unwinds through cleanup.
            if not any(is_user_file(f.f_code.co_filename) for f, _ in frames):
                return
            self._swallowed += 1
            if self._swallowed >= 3 and self.stuck is not None:
                self.stuck(self._error())
            raise _Timeout()
        inside = _ACTIVE[_ACTIVE.index(self):] if self in _ACTIVE else [self]
        innermost = inside[-1]
        function, where, inner = self._locate(frames, inside)
        # No user code running: loom's or torch's own, the capture's.
        subject = innermost.subject if function or where else "the capture"
        if not where and frames:
            where = _place(frames[-1])
        stage = next((g.stage for g in reversed(inside) if g.stage), "")
        self._expired = dict(
            message=self._message(function, where, inner, stage,
                                  f"ran past the {self.timeout:g} s timeout", subject=subject),
            function=function, where=where, stage=stage,
            error=f"timeout after {self.timeout:g} s")
        raise _Timeout()

    def _arm(self):
        if self.timeout is None:
            return
        if not hasattr(signal, "setitimer"):
            raise CaptureError("a capture timeout needs signal.setitimer (POSIX)")
        if not _main_thread():
            raise CaptureError("a capture timeout runs on SIGALRM, which only the main "
                               "thread receives: call verify from the main thread, or "
                               "without capture_timeout")
        handler = signal.signal(signal.SIGALRM, self._alarm)
        # Again every second after the first, should the user's code swallow it.
        previous = signal.setitimer(signal.ITIMER_REAL, self.timeout, 1.0)
        self._saved = (handler, previous, time.monotonic())

    def _disarm(self):
        if self._saved is None:
            return
        handler, previous, started = self._saved
        self._saved = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if previous[0] > 0:  # a timer of the caller's: what was left of it
            signal.setitimer(signal.ITIMER_REAL,
                             max(previous[0] - (time.monotonic() - started), 1e-3),
                             previous[1])

    # -- the context manager --

    def __enter__(self):
        self._entry = sys._getframe(1)
        self._arm()
        if _main_thread():
            _ACTIVE.append(self)
        return self

    def __exit__(self, kind, e, tb):
        armed = self._saved is not None
        self._disarm()
        if self in _ACTIVE:
            del _ACTIVE[_ACTIVE.index(self):]
        self._entry = None
        if e is None:
            return False
        if isinstance(e, _Timeout):
            if not armed or self._expired is None:
                return False  # an outer guard's
            raise self._error() from e
        error = self.launchers_error(e)
        if error is None:
            self._mark(e)
            return False
        raise error from e

    def _error(self):
        expired = dict(self._expired)
        return LauncherError(expired.pop("message"), **expired)

    def launchers_error(self, e):
        """The LauncherError for exception `e` if the launcher's code raised it (or,
        for a CaptureError of a failed trace, its cause); for a failed trace whose
        cause came from the user's code but no launcher function (the model's
        forward, or torch refusing what it does), a CaptureError with that place;
        else None."""
        cause = e
        if isinstance(e, CaptureError):
            cause = e.__cause__
            if type(e) is not CaptureError or cause is None or isinstance(cause, CaptureError):
                return None
        frames = _traceback_frames(cause.__traceback__)
        function, where, inner = self._locate(frames)
        if isinstance(cause, SyntaxError) and cause.filename and \
                os.path.abspath(cause.filename) in self.files:
            from loom.torch.lower import short_path
            where, inner = f"{short_path(cause.filename)}:{cause.lineno}", ""
        if not function and not where:
            return None  # no user code on its way: loom's or torch's own
        if isinstance(cause, Exception) and frames and \
                _in_loom(frames[-1][0].f_code.co_filename):
            return None  # raised by loom itself
        if isinstance(cause, SystemExit):
            verb, detail = "exited", f"sys.exit({cause.code!r})"
        else:
            verb, detail = "failed", exception_text(cause)
        if cause is not e and not function:
            stage = self.stage.replace("tracing ", "", 1)
            return CaptureError(self._message("", where, inner, stage, verb, detail,
                                              subject="tracing the training step"))
        return LauncherError(self._message(function, where, inner, self.stage, verb, detail),
                             function=function, where=where, stage=self.stage, error=detail)

    def _mark(self, e):
        """Notes on a failure that passes what loom.torch was doing (`loom_stage`, for
        the command's error line)."""
        if self.stage and getattr(e, "loom_stage", None) is None:
            try:
                e.loom_stage = self.stage
            except AttributeError:
                pass


@contextlib.contextmanager
def timeouts_paused():
    """The block runs with the timeouts of the guards around it stopped, and they
    go on with what was left of them after it (the proof: a call into C++ that a
    capture's timeout does not bound, nor could interrupt)."""
    if not _main_thread() or not any(g._saved is not None for g in _ACTIVE):
        yield
        return
    left = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, *left)


def check_timeout(timeout, what="the capture timeout"):
    """A timeout in seconds: None, or a positive finite number."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise CaptureError(f"{what} must be a positive number of seconds, not {timeout!r}")
    return float(timeout)
