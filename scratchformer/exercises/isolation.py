"""The learner's file runs in a child process, with a time limit and a memory limit.

    grade = run_isolated("linear", Path("linear.py"), time_limit=60, memory_limit=2 << 30)

The child grades the file (`grading.grade_file`) and writes JSON lines into a pipe: where it is
("your backward on Linear(4, 3) on x (2, 3, 4)") as it goes, then the verdict. No pickle: the
learner's code never sends objects, only the grader's strings. On Linux the child is a fork of
this process (it inherits the reference gradients computed before); elsewhere it is
`python -m scratchformer.exercises.isolation`, a fresh interpreter. The child's address space is
limited to what it starts with plus `memory_limit` (RLIMIT_AS, so a huge allocation raises
MemoryError inside the learner's code), its CPU time as a backstop if this process dies; this
process kills it at `time_limit` seconds of wall time. Whatever the child does (exit(),
os._exit(), a signal, an endless loop), the result is one Grade, or a DataError for a file
that does not load.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from scratchformer.errors import DataError, ResourceError

FINAL = ("grade", "data_error", "crash")  # the kinds of the child's last message
REAP_S = 5.0  # how long the child may take to exit after its verdict before it is killed


def _limit(time_limit: float, memory_limit: int) -> None:
    """In the child: CPU seconds (a backstop: its threads may use every core) and address space."""
    try:
        import resource
    except ImportError:  # Windows: the wall-clock limit alone
        return
    cpu = int(math.ceil(time_limit)) * max(1, os.cpu_count() or 1) + 5
    _set(resource, resource.RLIMIT_CPU, cpu)
    try:
        with open("/proc/self/statm") as f:  # the address space the child starts with (Linux)
            start = int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return  # no figure to add to: macOS does not enforce RLIMIT_AS anyway
    _set(resource, resource.RLIMIT_AS, start + memory_limit)


def _set(resource, which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    if soft == resource.RLIM_INFINITY or value < soft:
        resource.setrlimit(which, (value, hard))


def _send(fd: int, message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def child_main(name: str, path: str, fd: int, time_limit: float, memory_limit: int) -> None:
    """Grade `path` and send the verdict into `fd`; never returns."""
    from scratchformer.exercises.grading import grade_file

    try:
        devnull = os.open(os.devnull, os.O_RDONLY)  # input() in the learner's code ends, it does not wait
        os.dup2(devnull, 0)
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - for the child's whole life
        _limit(time_limit, memory_limit)
        grade = grade_file(name, path, progress=lambda where: _send(fd, {"kind": "progress", "where": where}))
        result = {"kind": "grade", "passed": grade.passed, "lines": grade.lines, "cause": grade.cause}
    except DataError as e:
        result = {"kind": "data_error", "message": str(e)}
    except BaseException as e:  # noqa: BLE001 - anything else is the grader's own failure, reported in one line
        result = {"kind": "crash", "message": f"{type(e).__name__}: {e}"}
    try:
        _send(fd, result)
        for stream in (sys.stdout, sys.stderr):  # the learner's prints, which os._exit would drop
            stream.flush()
    finally:
        os._exit(0)


def can_fork() -> bool:
    """True where the child is a fork of this process (Linux: macOS's and Windows's BLAS and
    process start-up do not allow a fork, as for the trainer's workers)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class _Child:
    """A started child: the read end of its pipe, and how to kill and reap it."""

    def __init__(self, name: str, path: Path, time_limit: float, memory_limit: int):
        self.read, write = os.pipe()
        if can_fork():
            for stream in (sys.stdout, sys.stderr):  # else the child would print this process's buffer again
                stream.flush()
            pid = os.fork()
            if pid == 0:
                os.close(self.read)
                child_main(name, str(path), write, time_limit, memory_limit)
            self.pid, self.popen = pid, None
        else:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scratchformer.exercises.isolation",
                    name,
                    str(path),
                    str(write),
                    repr(time_limit),
                    str(memory_limit),
                ],
                pass_fds=(write,),
                stdin=subprocess.DEVNULL,
            )
            self.pid = self.popen.pid
        os.close(write)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def reap(self, wait_s: float) -> int | None:
        """The exit code (minus the signal's number for a signal), or None if still running."""
        end = time.monotonic() + wait_s
        while True:
            if self.popen is not None:
                code = self.popen.poll()
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                code = os.waitstatus_to_exitcode(status) if pid else None
            if code is not None or time.monotonic() >= end:
                return code
            time.sleep(0.01)


def run_isolated(name: str, path: Path, time_limit: float, memory_limit: int):
    """Grade `path` in a child (see the module docstring): a Grade, or DataError."""
    from scratchformer.exercises.grading import Grade

    try:
        child = _Child(name, path, time_limit, memory_limit)
    except OSError as e:  # no process or pipe to be had (EAGAIN, ENOMEM, too many open files)
        raise ResourceError(
            f"cannot start the process that grades {path}: {e.strerror or e}; "
            "free some memory or processes and try again"
        ) from None
    messages: list[dict] = []
    buffer = b""
    deadline = time.monotonic() + time_limit
    timed_out = False
    try:
        while not (messages and messages[-1].get("kind") in FINAL):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([child.read], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(child.read, 1 << 16)
            if not chunk:
                break  # the child ended
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            messages += [json.loads(line) for line in lines if line.strip()]
        code = child.reap(REAP_S if not timed_out else 0)
        if code is None:
            child.kill()
            code = child.reap(REAP_S)
    except BaseException:  # Ctrl-C here: the child goes too
        child.kill()
        child.reap(REAP_S)
        raise
    finally:
        os.close(child.read)
    last = messages[-1] if messages else {}
    if last.get("kind") == "grade":
        return Grade(name, last["passed"], last["lines"], last["cause"])
    if last.get("kind") == "data_error":
        raise DataError(last["message"])
    where = f" in {last['where']}" if last.get("kind") == "progress" else ""
    if last.get("kind") == "crash":
        what, cause = f"the grader failed{where}: {last['message']}", None
    elif timed_out:
        what = f"the grading did not finish within {time_limit:g} s: it was stopped{where}"
        cause = (
            "an endless loop (a loop whose condition never changes), or far more work than the exercise needs"
        )
    elif code is not None and code < 0:
        sig = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        what = f"the grading process was killed by {sig}{where}"
        cause = (
            "it ran out of its CPU time: an endless loop"
            if sig == "SIGXCPU"
            else "it ran out of memory, or the code crashed the interpreter"
        )
    else:
        what = f"your code ended the grading process (exit status {code}){where} before a verdict"
        cause = "os._exit() or a similar call ends the program: a backward must return its gradient"
    return Grade(
        name,
        False,
        [
            f"wrong: {name}: {what}",
            f"likely cause: {cause}" if cause else "likely cause: not one this checker knows",
        ],
        cause,
    )


if __name__ == "__main__":  # the child, where processes are not forked
    child_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
