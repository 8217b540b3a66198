"""A one-line status on standard error while the torch route's stages run (checking
the batch, tracing each rank and the single-device step, lowering the plan, proving
it), as the loom command shows its steps: a capture of minutes is never a silent
terminal. Shown only when the stream is a terminal: output captured by CI or a pipe
is unchanged."""

import sys
import time


class TerminalStatus:
    """`TerminalStatus("loom.torch")(what)` replaces the line with what runs now (the
    stage before it shows how long it took when that was a second or more);
    `done()` clears it before the result is printed."""

    def __init__(self, command, stream=None):
        self.command = command
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.shown = bool(isatty and isatty())
        self.last = None
        self.since = 0.0

    def __call__(self, what):
        if not self.shown:
            return
        now = time.monotonic()
        done = ""
        if self.last is not None and now - self.since >= 1.0:
            done = f" ({self.last}: {now - self.since:.1f} s)"
        self.stream.write(f"\r\033[K{self.command}: {what}{done}")
        self.stream.flush()
        self.last, self.since = what, now

    def done(self):
        if self.shown and self.last is not None:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.last = None
