"""`python -m loom.torch titan [Loom's options] TORCHTITAN'S ARGUMENTS...`: a torchtitan
job proved from torchtitan's own command line (titan.py).

Every argument Loom does not know is torchtitan's (`--job.config_file`, `--model.name`,
`--parallelism.tensor_parallel_degree`, ...), parsed by torchtitan's ConfigManager as
its trainer parses them. Loom's own: --nproc (the ranks torchrun would start; by
default the product of the degrees), --report, --junit, --timeout, --timeout-ms,
--cache, --every-rank, --traceback. Prints the job, then the verdict as `verify`
does, and exits as it does: 0 proved equivalent, 1 not equivalent, 2 undecided or an
error.
"""

import argparse
import sys
import traceback

from loom.torch.cli import (UsageError, _jsonable, _positive_int, add_run_options,
                            check_report_paths, error_line, finish, report_json,
                            undecided_json)
from loom.torch.errors import CaptureError
from loom.torch.launcher import Guard
from loom.torch.terminal_status import TerminalStatus


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m loom.torch titan", allow_abbrev=False,
        description="Prove a torchtitan job from torchtitan's own command line: every "
                    "argument this command does not list is torchtitan's trainer's "
                    "(--job.config_file, --model.name, --parallelism.*, --training.*, "
                    "...). Exit 0 proved equivalent, 1 not equivalent, 2 undecided or "
                    "an error.")
    parser.add_argument("--nproc", type=_positive_int, metavar="N",
                        help="the ranks torchrun starts (default: the product of the "
                             "parallelism degrees, data_parallel_shard_degree -1 as 1)")
    add_run_options(parser, timeout_help="stop building and capturing the job after "
                                         "SECONDS (default: no limit)")
    return parser


def titan_command(argv):
    args, titan_argv = _parser().parse_known_args(argv)
    args.launcher = "torchtitan"  # what the reports name as the program's source
    status = TerminalStatus("loom.torch")
    try:
        check_report_paths(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    name, mesh = "torchtitan " + " ".join(titan_argv), None

    def undecided(e):
        if args.traceback:
            traceback.print_exception(e)
        print("verdict:   undecided")
        line = error_line(e)
        print(f"error: {line}", file=sys.stderr)
        return undecided_json(name, _jsonable(mesh), line)

    try:
        import loom.torch
        from loom.torch.api import check_cache_dir
        from loom.torch.titan import titan_job
        try:
            check_cache_dir(args.cache)
        except CaptureError as e:
            raise UsageError(f"--cache: {e}") from e
        with Guard(timeout=args.timeout, subject="torchtitan's job") as guard:
            guard.progress = status
            status("building torchtitan's job")
            job = titan_job(titan_argv, world_size=args.nproc)
            mesh = job.mesh
            name = job.describe
            status.done()
            print(f"job:       {name}", flush=True)
            names = job.launcher()
            report = loom.torch.verify(
                model=names["model"], parallelize=names["parallelize"], mesh=mesh,
                inputs=names["inputs"], optimizer=names["optimizer"],
                train_step=names["train_step"], timeout_ms=args.timeout_ms,
                cache_dir=args.cache, every_rank=args.every_rank, progress=status,
                name=f"{job.job_config.model.name} {job.job_config.model.flavor}")
        status.done()
        print(report.summary())
        doc = report_json(report, name, mesh)
    except BaseException as e:  # never a pass: undecided, with the reason
        status.done()
        if isinstance(e, UsageError):
            print(f"error: {e}", file=sys.stderr)
            doc = undecided_json(name, _jsonable(mesh), str(e))
        else:
            doc = undecided(e)
    return finish(args, doc)
