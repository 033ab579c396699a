"""The learner's code runs in a child process that only runs it: the grader, in this process,
sends it inputs and judges the arrays it sends back.

    with Learner("linear", "Linear", "backward", Path("linear.py"), 60, 2 << 30) as child:
        outcome = child.run(spec)         # runner.run_case in the child, on the grader's input
        value = child.call(args)          # an exercise of another kind: its function on these arguments

The child is never a fork of this process: on Linux it is forked from a clean server (`serve`, a
fresh interpreter started once per grading process, which imports NumPy and scratchformer and
never runs a learner's code or holds a grader's array: a fork of it starts in milliseconds);
elsewhere it is a fresh interpreter (`python -c ...child_main(...)`). Nothing the grader
computed (the reference gradients, the finite differences) is in its memory. It starts in its
own session and process group, in a scratch directory of its own, with limits on its address
space (what it starts with plus `memory_limit`: a huge allocation is a MemoryError in the
learner's code) and on its CPU time (a backstop); this process kills it at `time_limit` seconds
of wall time and, whatever happened, ends its whole process group and deletes the scratch
directory. Before the learner's file is loaded, an audit hook (PEP 578; it cannot be removed)
refuses in the child, with a PermissionError in the learner's code:

    - opening the reference solutions (exercises/solutions/), or another process's /proc files;
    - writing, creating, renaming or deleting anything outside the scratch directory;
    - starting a process (fork, exec, spawn, system, subprocess) or a subinterpreter;
    - signalling any process but itself; raising its own limits; ctypes; sockets.

(What stays possible is what a process can do with its own memory: an audit hook does not see
every C-level trick, so the grader's verdict never rests on anything the child says about
itself, only on the arrays it returns for inputs it was just sent.)

The two talk in JSON lines over two pipes (no pickle): a request, then its answer; arrays as
their dtype, shape and base64 bytes (numeric dtypes only). Whatever the child sends is checked
here as data: a line that is not JSON, a message out of turn or malformed, a line over
MAX_LINE bytes, a child that dies or exits, ends as `ChildFailed` with one line saying what
happened (the grader makes it the verdict). The learner's print() output goes to this process's
stdout and stderr, as before.
"""

from __future__ import annotations

import base64
import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from scratchformer.checks import ascii_digits
from scratchformer.errors import DataError, ResourceError

MAX_LINE = 64 << 20  # bytes of one message: the exercises' arrays are kilobytes
STARTUP_S = 120.0  # seconds a child may take to start (a fresh interpreter on a loaded machine)
REAP_S = 5.0  # how long the child may take to exit once told to
SOLUTIONS = Path(__file__).resolve().parent / "solutions"
_NUMERIC = "biufc"  # the dtype kinds that travel: bool, int, uint, float, complex


class ChildFailed(Exception):
    """The child gave no usable answer: `what` (one line) and, where known, the likely `cause`."""

    def __init__(self, what: str, cause: str | None = None):
        super().__init__(what)
        self.what, self.cause = what, cause


class LearnerRaised(Exception):
    """The learner's function raised: ("Type: message", " (line N: code)")."""

    def __init__(self, message: str, where: str):
        super().__init__(message)
        self.message, self.where = message, where


class Foreign:
    """A value the child could not send as itself (a list of arrays is sent; a module is not):
    its type's name and the start of its repr."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text


# -- values as JSON ------------------------------------------------------------------------------
class WireError(ValueError):
    pass


def encode(v, depth: int = 0):
    """A value as JSON: None, bool, int, float, str as themselves; arrays, NumPy scalars, tuples,
    lists, dicts (any keys) tagged; anything else a Foreign."""
    if depth > 20:
        return {"foreign": [type(v).__name__, "nested too deeply"]}
    if v is None or isinstance(v, (bool, str)):
        return v if not isinstance(v, str) else v[:100_000]
    if isinstance(v, int):
        return v if abs(v) < 2**63 else {"foreign": ["int", f"an int of {v.bit_length()} bits"]}
    if isinstance(v, float):
        return {"float": repr(v)} if not math.isfinite(v) else v
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in _NUMERIC:
            return {"foreign": ["ndarray", f"an array of dtype {v.dtype}"]}
        return {"array": [v.dtype.str, list(v.shape), base64.b64encode(v.tobytes(order="C")).decode("ascii")]}
    if isinstance(v, np.generic) and v.dtype.kind in _NUMERIC:
        return {"scalar": encode(np.asarray(v), depth + 1)}
    if isinstance(v, (tuple, list)):
        return {type(v).__name__: [encode(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    rebuild = getattr(v, "child_rebuild", None)  # an argument the child makes itself (a model)
    if isinstance(rebuild, tuple):
        return {"rebuild": encode(rebuild, depth + 1)}
    try:
        text = repr(v)[:200]
    except Exception:  # noqa: BLE001 - a repr that raises: its type alone
        text = f"a {type(v).__name__}"
    return {"foreign": [type(v).__name__, text]}


def decode(j, depth: int = 0):
    """The value `encode` gave; WireError for anything else."""
    if depth > 24:
        raise WireError("nested too deeply")
    if j is None or isinstance(j, (bool, int, float, str)):
        return j
    if not (isinstance(j, dict) and len(j) == 1):
        raise WireError(f"not a value: {str(j)[:60]}")
    ((tag, body),) = j.items()
    if tag == "array":
        if not (
            isinstance(body, list) and len(body) == 3 and all(isinstance(s, int) and s >= 0 for s in body[1])
        ):
            raise WireError("a malformed array")
        dtype_text, shape, data = body
        try:
            dtype = np.dtype(dtype_text)
            raw = base64.b64decode(data, validate=True)
        except (TypeError, ValueError) as e:
            raise WireError(f"a malformed array ({e})") from None
        if dtype.kind not in _NUMERIC or len(raw) != math.prod(shape) * dtype.itemsize:
            raise WireError("an array whose bytes do not fit its shape")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if tag == "float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "scalar":
        a = decode(body, depth + 1)
        if not (isinstance(a, np.ndarray) and a.shape == ()):
            raise WireError("a malformed scalar")
        return a[()]
    if tag in ("tuple", "list") and isinstance(body, list):
        items = [decode(x, depth + 1) for x in body]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        pairs = [(decode(k, depth + 1), decode(x, depth + 1)) for k, x in body]
        try:
            return dict(pairs)
        except TypeError:  # an unhashable key (a list): kept as what it is not
            return Foreign("dict", "a dict with unhashable keys")
    if (
        tag == "foreign"
        and isinstance(body, list)
        and len(body) == 2
        and all(isinstance(s, str) for s in body)
    ):
        return Foreign(body[0][:100], body[1][:200])
    if tag == "rebuild":
        return ("rebuild", decode(body, depth + 1))
    raise WireError(f"an unknown value tag {tag!r}")


def _line(message: dict) -> bytes:
    return (json.dumps(message, allow_nan=False) + "\n").encode("ascii")


def _send(fd: int, message: dict) -> None:
    data = _line(message)
    while data:
        data = data[os.write(fd, data) :]


# -- this process's side -------------------------------------------------------------------------
class Learner:
    """The child that runs one learner's file (see the module docstring); a context manager."""

    def __init__(
        self,
        name: str,
        class_name: str,
        kind: str,
        path: Path,
        time_limit: float,
        memory_limit: int,
        progress=None,
    ):
        self.name, self.path = name, Path(path)
        self.time_limit = time_limit
        self.where = ""  # the child's last progress: where a kill found it
        self.progress = progress
        self.scratch = tempfile.mkdtemp(prefix="scratchformer-grading-")
        self.proc = None
        try:
            self.proc, self.write, self.read = _start_child(self.scratch, time_limit, memory_limit)
        except OSError as e:  # no process or pipe to be had (EAGAIN, ENOMEM, too many open files)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise ResourceError(
                f"cannot start the process that grades {path}: {e.strerror or e}; "
                "free some memory or processes and try again"
            ) from None
        self.buffer = b""
        self.deadline = (
            time.monotonic() + STARTUP_S
        )  # a fresh interpreter's imports are not the learner's time
        self._answer(("ready",))
        self.deadline = time.monotonic() + time_limit
        answer = self._ask(
            {
                "kind": "load",
                "path": str(self.path.resolve()),
                "class_name": class_name,
                "exercise_kind": kind,
            },
            ("loaded", "data_error"),
        )
        if answer["kind"] == "data_error":
            self.close()
            raise DataError(_one_line(answer.get("message"), 1000))
        self.defines_class = bool(answer.get("is_class"))

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, spec: dict) -> dict:
        """runner.run_case of the learner's class on `spec`, in the child -> the outcome."""
        answer = self._ask({"kind": "run", "spec": encode(spec)}, ("ran",))
        outcome = answer.get("outcome")
        if not isinstance(outcome, dict):
            raise self._foreign("an outcome that is not an object")
        try:
            return _checked_outcome({k: decode(v) for k, v in outcome.items()})
        except WireError as e:
            raise self._foreign(f"an outcome that is not the runner's ({e})") from None

    def call(self, *args):
        """The learner's function on `args`, in the child -> what it returned; LearnerRaised."""
        answer = self._ask({"kind": "call", "args": encode(args)}, ("returned", "raised"))
        try:
            if answer["kind"] == "raised":
                message, where = answer.get("error") or ["", ""]
                raise LearnerRaised(_one_line(message, 400), _one_line(where, 300))
            return decode(answer.get("value"))
        except (WireError, TypeError, ValueError) as e:
            raise self._foreign(f"a value that is not one ({e})") from None

    __call__ = call

    # -- the pipe ---------------------------------------------------------------------------------
    def _ask(self, request: dict, answers: tuple[str, ...]) -> dict:
        try:
            _send(self.write, request)
        except OSError:  # the child is gone: what it left says why
            return self._answer(answers)
        return self._answer(answers)

    def _answer(self, answers: tuple[str, ...]) -> dict:
        """The next message that is not a progress report; ChildFailed for anything else."""
        while True:
            line = self._next_line()
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                raise self._foreign(f"a line that is not JSON ({_shown(line)})") from None
            kind = message.get("kind") if isinstance(message, dict) else None
            if kind == "progress" and isinstance(message.get("where"), str):
                self.where = _one_line(message["where"], 300)
                if self.progress is not None:
                    self.progress(f"your {self.where}")
                continue
            if kind not in answers:
                raise self._foreign(f"{_shown(line)} where {' or '.join(answers)} was due")
            return message

    def _next_line(self) -> bytes:
        while b"\n" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._stopped()
            ready, _, _ = select.select([self.read], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self.read, 1 << 16)
            if not chunk:
                raise self._ended()
            self.buffer += chunk
            if len(self.buffer) > MAX_LINE and b"\n" not in self.buffer:
                raise self._foreign(f"a message over {MAX_LINE:,} bytes")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def _foreign(self, what: str) -> ChildFailed:
        self.close(at_once=True)
        return ChildFailed(
            f"the grading process sent {what}{self._in()}",
            "something in your file writes to the grader's pipe (a file descriptor it did not open) "
            "or changes what the grader's process sends",
        )

    def _in(self) -> str:
        return f" in your {self.where}" if self.where else ""

    def _stopped(self) -> ChildFailed:
        self.close(at_once=True)
        return ChildFailed(
            f"the grading did not finish within {self.time_limit:g} s: it was stopped{self._in()}",
            "an endless loop (a loop whose condition never changes), or far more work than the exercise needs",
        )

    def _ended(self) -> ChildFailed:
        code = self.proc.wait(REAP_S)
        self.close()
        if code is not None and code < 0:
            sig = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return ChildFailed(
                f"the grading process was killed by {sig}{self._in()}",
                "it ran out of its CPU time: an endless loop"
                if sig == "SIGXCPU"
                else "it ran out of memory, or the code crashed the interpreter",
            )
        return ChildFailed(
            f"your code ended the grading process (exit status {code}){self._in()} before it answered",
            "os._exit() or a similar call ends the program: a backward must return its gradient",
        )

    def close(self, at_once: bool = False) -> None:
        """Tell the child to exit (`at_once`: do not wait for it), then end its whole process
        group (every descendant) and delete its scratch directory (idempotent)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            _send(self.write, {"kind": "exit"})
        except OSError:
            pass
        for fd in (self.write, self.read):
            try:
                os.close(fd)
            except OSError:
                pass
        if not at_once:
            proc.wait(min(REAP_S, max(0.1, self.deadline - time.monotonic())))
        proc.end_group()
        shutil.rmtree(self.scratch, ignore_errors=True)


# -- starting the child: forked from a clean server (Linux), or a fresh interpreter ---------------
class _Child:
    """A started child: its pid (the leader of its own process group), how to wait for it."""

    def __init__(self, pid: int, wait: Callable[[float], int | None]):
        self.pid, self._wait, self.code = pid, wait, None

    def wait(self, timeout: float) -> int | None:
        """The exit code (minus the signal's number for a signal), or None if still running."""
        if self.code is None:
            try:
                self.code = self._wait(timeout)
            except OSError:  # the fork server is gone (it reaped nothing): the child is ended anyway
                return None
        return self.code

    def end_group(self) -> None:
        """SIGKILL to the child's process group (every descendant it may have started), then reap."""
        for kill in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError, AttributeError, OSError):
                pass
        self.wait(REAP_S)


def _start_child(scratch: str, time_limit: float, memory_limit: int) -> tuple[_Child, int, int]:
    """A child running child_main in `scratch`, in its own session; -> (child, write fd, read fd)."""
    to_child, from_child = os.pipe(), os.pipe()
    ends = (to_child[0], from_child[1])
    try:
        server = _server()
        if server is not None:
            pid = server.fork(scratch, time_limit, memory_limit, ends)
            child = _Child(pid, lambda timeout, pid=pid: server.wait(pid, timeout))
        else:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-B",
                    "-c",
                    _CHILD_MAIN,
                    *map(str, ends),
                    repr(time_limit),
                    str(memory_limit),
                ],
                pass_fds=ends,
                stdin=subprocess.DEVNULL,
                cwd=scratch,
                env=_child_env(),
                start_new_session=True,  # its own session and process group: killpg ends every descendant
            )
            child = _Child(proc.pid, lambda timeout: _popen_wait(proc, timeout))
    except BaseException:
        for fd in (*to_child, *from_child):
            os.close(fd)
        raise
    for fd in ends:
        os.close(fd)
    return child, to_child[1], from_child[0]


_CHILD_MAIN = (
    "import sys; from scratchformer.exercises.isolation import child_main; child_main(*sys.argv[1:])"
)


def _popen_wait(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


class _Server:
    """A clean interpreter that forks the children: it imports what a child needs once and never
    runs a learner's code or holds a grader's array itself, so a fork of it starts in a few
    milliseconds with nothing of the grader in its memory. One per grading process (a forked
    grader starts its own); it ends when this process does."""

    def __init__(self):
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.owner = os.getpid()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-B", "-c", _SERVE, str(there.fileno())],
                pass_fds=(there.fileno(),),
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                start_new_session=True,  # Ctrl-C in a terminal reaches the grader, which ends it
            )
        finally:
            there.close()
        self.sock = here
        self._ask({"op": "ping"}, timeout=STARTUP_S)

    def alive(self) -> bool:
        return self.owner in (os.getpid(), None) and self.proc.poll() is None

    def _ask(self, request: dict, fds: tuple[int, ...] = (), timeout: float = 30.0) -> dict:
        socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            raise OSError(f"the grading server did not answer within {timeout:g} s")
        answer = json.loads(self.sock.recv(4096) or b"{}")
        if "error" in answer:
            raise OSError(answer["error"])
        return answer

    def fork(self, scratch: str, time_limit: float, memory_limit: int, ends: tuple[int, int]) -> int:
        request = {"op": "fork", "scratch": scratch, "time_limit": time_limit, "memory_limit": memory_limit}
        return int(self._ask(request, ends)["pid"])

    def wait(self, pid: int, timeout: float) -> int | None:
        return self._ask({"op": "wait", "pid": pid, "timeout": timeout}, timeout=timeout + 30.0)["code"]


_SERVE = "import sys; from scratchformer.exercises.isolation import serve; serve(int(sys.argv[1]))"
_SERVERS: list[_Server] = []


def _server() -> _Server | None:
    """This process's fork server (started on first use), or None where the child is a fresh
    interpreter instead: without fork and fd passing (Windows), or where a fork of a process
    that imported NumPy is unsafe (macOS's Accelerate, as for the trainer's workers)."""
    if not (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "send_fds")):
        return None
    if not (_SERVERS and _SERVERS[0].alive()):
        _SERVERS[:] = [_Server()]
    return _SERVERS[0]


def share_server_with_forks() -> None:
    """Start this process's fork server now and let the processes it forks use it too (each
    starts its own otherwise): for a process that forks graders one at a time and waits for each
    (the mutation harness, scripts/mutants.py), never for forks that grade at once."""
    server = _server()
    if server is not None:
        server.owner = None


def serve(fd: int) -> None:
    """The fork server's loop: fork a child on request (child_main in its scratch directory, in a
    session of its own), report a child's exit; end when the grading process ends."""
    import scratchformer.exercises.runner  # noqa: F401 - what every child needs, imported once here
    import scratchformer.nn  # noqa: F401

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    parent = os.getppid()
    while os.getppid() == parent:
        if not select.select([sock], [], [], 1.0)[0]:
            continue
        message, fds, _, _ = socket.recv_fds(sock, 4096, 2)
        if not message:
            break
        request = json.loads(message)
        try:
            if request["op"] == "fork":
                pid = os.fork()
                if pid == 0:
                    try:
                        sock.close()
                        os.setsid()  # its own session and process group
                        os.chdir(request["scratch"])
                        child_main(fds[0], fds[1], request["time_limit"], request["memory_limit"])
                    finally:
                        os._exit(1)  # child_main never returns; this is for a failure before it runs
                answer = {"pid": pid}
            elif request["op"] == "wait":
                answer = {"code": _wait_pid(request["pid"], request["timeout"])}
            else:
                answer = {"pong": True}
        except OSError as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        finally:
            for f in fds:
                os.close(f)
        sock.send(json.dumps(answer).encode())
    os._exit(0)


def _wait_pid(pid: int, timeout: float) -> int | None:
    end = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None  # reaped already
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= end:
            return None
        time.sleep(0.005)


def _child_env() -> dict:
    """This process's environment, with this package first on the child's path (the
    scratchformer the grader is, not another one the child's directory would find)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _one_line(text, limit: int) -> str:
    return " ".join(str(text).split())[:limit] if text is not None else ""


def _shown(line: bytes) -> str:
    text = line[:60].decode("utf-8", "replace")
    return repr(text + ("..." if len(line) > 60 else ""))


_OUTCOME = {  # key -> the type it must decode to (runner.run_case's outcome)
    "params": list,
    "param_shapes": dict,
    "saved": dict,
    "grads": dict,
    "inputs_after": list,
    "saved_after": dict,
    "accumulated": dict,
}


def _checked_outcome(o: dict) -> dict:
    """An outcome as runner.run_case makes it, or WireError."""
    error = o.get("error")
    if error is not None:
        if not (
            isinstance(error, (list, tuple)) and len(error) == 3 and all(isinstance(s, str) for s in error)
        ):
            raise WireError("a malformed error")
        where = _one_line(error[2], 300)
        o["error"] = (error[0], _one_line(error[1], 400), f" {where}" if where else "")
    for key, kind in _OUTCOME.items():
        if key in o and not isinstance(o[key], kind):
            raise WireError(f"{key} is not a {kind.__name__}")
    if not all(isinstance(n, str) for n in o.get("params", [])):
        raise WireError("a parameter name that is not a string")
    for key in ("grads", "accumulated", "saved", "saved_after"):
        if not all(isinstance(k, str) for k in o.get(key, {})):
            raise WireError(f"a name in {key} that is not a string")
    return o


# -- the child's side ----------------------------------------------------------------------------
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


_PROCESSES = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile"}
_PROCESSES |= {"subprocess.Popen", "pty.spawn", "cpython._xxsubinterpreters.create"}
_FILE_CHANGES = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link"}
_FILE_CHANGES |= {"os.symlink", "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.setxattr"}
_FILE_CHANGES |= {
    "os.removexattr",
    "shutil.copyfile",
    "shutil.copymode",
    "shutil.copystat",
    "shutil.copytree",
}
_FILE_CHANGES |= {"shutil.rmtree", "shutil.move", "shutil.chown", "shutil.unpack_archive"}
_NO_IMPORT = {"_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_TRUNC", 0)


def guard(scratch: str) -> None:
    """Install the audit hook the module docstring describes (for the rest of this process)."""
    scratch = os.path.realpath(scratch)
    solutions = os.path.realpath(SOLUTIONS)
    own = os.getpid()
    allowed_devices = {os.path.realpath(os.devnull)}
    busy = []

    def inside(path, root: str) -> bool:
        if isinstance(path, int):
            return True  # an open descriptor: opened under these rules, or inherited
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        full = os.path.realpath(os.fspath(path))
        return full == root or full.startswith(root + os.sep)

    def path_of(path) -> str | None:
        if isinstance(path, int):
            return None
        return os.path.realpath(os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path))

    def refuse(what: str):
        raise PermissionError(f"the grader does not let the code it grades {what}")

    def hook(event: str, args: tuple) -> None:
        if busy:  # an event raised by this hook's own work (realpath)
            return
        busy.append(1)
        try:
            _check(event, args)
        finally:
            busy.pop()

    def _check(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            full = path_of(path)
            if full is None:
                return
            if full == solutions or full.startswith(solutions + os.sep):
                refuse("read the reference solutions")
            parts = full.split(os.sep)
            if len(parts) > 2 and parts[1] == "proc" and ascii_digits(parts[2]) and int(parts[2]) != own:
                refuse("read another process's files")
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and not inside(path, scratch) and full not in allowed_devices:
                refuse(f"write outside its scratch directory ({full})")
        elif event in _FILE_CHANGES:
            for path in args:
                if isinstance(path, (str, bytes, os.PathLike)) and not inside(path, scratch):
                    refuse(f"change files outside its scratch directory ({event})")
        elif event in _PROCESSES:
            refuse(f"start a process ({event})")
        elif event == "os.kill" and args and args[0] not in (own, 0):
            refuse("signal another process")
        elif event == "os.killpg" and args and args[0] != os.getpgid(0):
            refuse("signal another process group")
        elif event == "resource.setrlimit":
            refuse("change its own limits")
        elif event.startswith("ctypes."):
            refuse("call C functions (ctypes)")
        elif event.startswith("socket.") and event.split(".")[1] in ("connect", "bind", "sendto", "sendmsg"):
            refuse("use the network")
        elif event == "import" and args and args[0] in _NO_IMPORT:
            refuse(f"import {args[0]}")

    sys.addaudithook(hook)


def _load(path: str, class_name: str, kind: str):
    """The learner's file imported by its path -> (what it defines under `class_name`, filename),
    or the data_error message."""
    import importlib.util

    from scratchformer.exercises.runner import message, where

    spec = importlib.util.spec_from_file_location(f"scratchformer_exercise_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        return None, f"{path}, line {e.lineno}: syntax error: {e.msg}"
    except BaseException as e:  # noqa: BLE001 - the learner's module-level code, exit() included: one line
        return None, f"{path} does not load: {message(e)}{where(e, module.__file__)}"
    if not hasattr(module, class_name):
        return (
            None,
            f"{path} defines no {'class ' if kind == 'backward' else ''}{class_name}: keep the stub's name",
        )
    return getattr(module, class_name), module.__file__


def _rebuilt(value):
    """An argument made here from its recipe ("rebuild", (builder, *args)): the exercise's model."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "rebuild":
        builder, *args = value[1]
        if builder == "induction_model":
            from scratchformer.exercises.induction import load_model, permuted_heads

            return permuted_heads(load_model()[0], list(args[0]))
        raise WireError(f"no builder {builder!r}")
    if isinstance(value, tuple):
        return tuple(_rebuilt(v) for v in value)
    return value


def child_main(read_fd, write_fd, time_limit, memory_limit) -> None:
    """Serve the grader's requests until told to exit (numbers, or the command line's strings);
    never returns."""
    read_fd, write_fd, time_limit, memory_limit = (
        int(read_fd),
        int(write_fd),
        float(time_limit),
        int(memory_limit),
    )
    _send(write_fd, {"kind": "ready"})
    from scratchformer.exercises.runner import message, run_case, where

    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # input() in the learner's code ends, it does not wait
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - for the child's whole life
    sys.dont_write_bytecode = True
    _limit(time_limit, memory_limit)
    progress = lambda where_: _send(write_fd, {"kind": "progress", "where": where_})  # noqa: E731
    answer, filename, buffer = None, "", b""
    guard(os.getcwd())
    while True:
        while b"\n" not in buffer:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                os._exit(0)
            buffer += chunk
        line, _, buffer = buffer.partition(b"\n")
        request = json.loads(line)
        kind = request["kind"]
        if kind == "exit":
            break
        try:
            if kind == "load":
                progress("file, loading it")
                answer, filename = _load(request["path"], request["class_name"], request["exercise_kind"])
                if answer is None:
                    reply = {"kind": "data_error", "message": filename}
                else:
                    reply = {"kind": "loaded", "is_class": isinstance(answer, type)}
            elif kind == "run":
                spec = decode(request["spec"])
                shown = spec.pop("shown", "")
                outcome = run_case(answer, spec, filename, lambda phase: progress(f"{phase} on {shown}"))
                reply = {"kind": "ran", "outcome": {k: encode(v) for k, v in outcome.items()}}
            else:  # "call"
                args = _rebuilt(decode(request["args"]))
                progress(f"{getattr(answer, '__name__', 'function')}")
                try:
                    reply = {"kind": "returned", "value": encode(answer(*args))}
                except BaseException as e:  # noqa: BLE001 - the learner's code: what it raised is the answer
                    reply = {"kind": "raised", "error": [message(e), where(e, filename)]}
        except MemoryError:  # sending a huge answer: say so in one line
            reply = {"kind": "raised", "error": ["MemoryError: the answer is too large to send", ""]}
        _send(write_fd, reply)
        for stream in (sys.stdout, sys.stderr):  # the learner's prints, which os._exit would drop
            stream.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
