#!/usr/bin/python3
"""ddp_suite.py: several of tests/python's programs in one launch, so that
Python and torch start once per world size instead of once per program.

    mpiexec -n W /usr/bin/python3 ddp_suite.py \\
        "ddp_hooks.py --plugin-dir DIR --out DIR --only allreduce,fp16" \\
        "ddp_resume.py --plugin-dir DIR --out DIR --phase full" ...

Each argument is one program's command line (a file of this folder and its
arguments, split as the shell would).  They run in turn, each with a job
of its own: this program initialises MPI itself, so that closing one
job (ddph_close) leaves MPI up for the next.  Before each it prints
"== PROGRAM ARGS" and after it "== exit N" (rank 0; N is that rank's exit
status), then closes the job.  Its own exit status is 1 when any failed.
For programs whose job fails on purpose (ddp_errors.py) use separate
launches: a failed job leaves MPI unfinalized."""
import ctypes
import importlib
import os
import shlex
import sys

import ddphook

MPI_THREAD_MULTIPLE = 3  # MPICH's mpi.h


def main():
    lib = ddphook.lib()  # libmpi comes with it (RTLD_GLOBAL)
    provided = ctypes.c_int()
    if lib.MPI_Init_thread(None, None, MPI_THREAD_MULTIPLE,
                           ctypes.byref(provided)) != 0:
        raise SystemExit("ddp_suite.py: MPI_Init_thread failed")
    rank = int(os.environ.get("PMI_RANK", "0"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    failed = 0
    for command in sys.argv[1:]:
        words = shlex.split(command)
        program = importlib.import_module(os.path.splitext(words[0])[0])
        if rank == 0:
            print("== %s" % command, flush=True)
        sys.argv = words
        rc = program.main(words[1:]) or 0
        job = ddphook.current_job()
        if job is not None:
            job.close()
        if rank == 0:
            print("== exit %d" % rc, flush=True)
        failed += rc != 0
    lib.MPI_Finalize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
