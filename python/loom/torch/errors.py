"""The errors loom.torch raises."""


class CaptureError(ValueError):
    """A model, parallel program or optimizer loom.torch cannot capture or lower,
    with the reason and, where there is one, the place in the user's code."""


class LauncherError(CaptureError):
    """The launcher's own code failed while loom.torch ran it: it raised, exited
    (sys.exit), was interrupted, or ran past the capture's timeout.

    function: the launcher's function that failed ("model", "parallelize", "inputs",
        "optimizer", "loss", "train_step", "train_context"), or "" where the failing
        code is no one function of the launcher's (the model's forward, a gradient
        hook, the launcher file's own top level);
    where: "file.py:12", the launcher's line that was running (the innermost frame in
        the launcher's files, else the innermost of the user's code);
    stage: what loom.torch was doing ("tracing rank 0", "loading the launcher", ...);
    error: the exception's type and message ("RuntimeError: ..."), or what stopped it.
    """

    def __init__(self, message, *, function="", where="", stage="", error=""):
        super().__init__(message)
        self.function = function
        self.where = where
        self.stage = stage
        self.error = error


class RefutedWhileLowering(Exception):
    """What a rank computes is no piece of the step's, found while lowering it (its
    parameters are pieces of another model's, _another_model; it adds pieces of one
    of the step's gradients at different multiples, rank_accumulation.py): nothing is
    left to prove; `doc.failures` says why."""

    def __init__(self, doc):
        super().__init__(doc.failures[-1]["message"])
        self.doc = doc
