"""The memory this process can still allocate (machine, cgroup, `ulimit -v`), and `check_fits` against it."""

from __future__ import annotations

import os

import numpy as np

from scratchformer.checks import ascii_digits
from scratchformer.errors import ConfigError, DTypeError, ResourceError

USABLE_FRACTION = 0.9  # leave the rest to the OS and the Python interpreter


def _read_first(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(4096).strip()
    except (OSError, ValueError):
        return None


def _machine_available() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free pages times the page size."""
    text = _read_first("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024  # the value is in kB
            except (ValueError, IndexError):
                break
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_left(root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's cgroup may still use: memory.max - memory.current (v2), or
    memory.limit_in_bytes - memory.usage_in_bytes (v1); None without a limit."""
    paths = []
    for line in (_read_first("/proc/self/cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one unified hierarchy
            paths.append((f"{root}{path.rstrip('/')}/memory.max", f"{root}{path.rstrip('/')}/memory.current"))
        elif "memory" in controllers.split(","):
            paths.append(
                (
                    f"{root}/memory{path.rstrip('/')}/memory.limit_in_bytes",
                    f"{root}/memory{path.rstrip('/')}/memory.usage_in_bytes",
                )
            )
    # inside a container the process's own cgroup is usually mounted at the root
    paths += [
        (f"{root}/memory.max", f"{root}/memory.current"),
        (f"{root}/memory/memory.limit_in_bytes", f"{root}/memory/memory.usage_in_bytes"),
    ]
    for limit_path, usage_path in paths:
        limit = _read_first(limit_path)
        if limit is None:
            continue
        if not ascii_digits(limit) or int(limit) >= 1 << 60:  # "max", or v1's "no limit" (~2^63)
            return None
        usage = _read_first(usage_path)
        return max(int(limit) - (int(usage) if ascii_digits(usage) else 0), 0)
    return None


def _address_space_left() -> int | None:
    """Bytes this process may still map under RLIMIT_AS (`ulimit -v`); None without a limit."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = 0
    for line in (_read_first("/proc/self/status") or "").splitlines():
        if line.startswith("VmSize:"):
            mapped = int(line.split()[1]) * 1024
    return max(soft - mapped, 0)


def memory_limits() -> dict[str, int]:
    """{what limits it: bytes this process can still allocate under it}, for each limit known."""
    limits = {
        "the machine's available memory": _machine_available(),
        "the cgroup's memory limit": _cgroup_left(),
        "the address-space limit (ulimit -v)": _address_space_left(),
    }
    return {name: left for name, left in limits.items() if left is not None}


def available_memory() -> int | None:
    """Bytes a new allocation can have: the smallest of memory_limits(), or None (unknown)."""
    return min(memory_limits().values(), default=None)


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


def check_fits(nbytes: int, what: str, option: str, available: int | None = None) -> None:
    """Raise ResourceError if `nbytes` exceeds the usable part of the available memory.

    `what` says what would be allocated ("a training batch"), `option` what to lower
    ("--batch-size or --block-size"). `available` defaults to available_memory(); when that
    is unknown, nothing is checked.
    """
    if (
        isinstance(nbytes, bool)
        or not isinstance(nbytes, (int, float, np.integer, np.floating))
        or not nbytes >= 0
    ):
        raise ConfigError(f"check_fits nbytes must be a number >= 0, got {nbytes!r}")
    if not isinstance(what, str) or not isinstance(option, str):
        raise DTypeError("check_fits what and option must be str (they make the message)")
    refuse_if(nbytes, what, f"lower {option}", available)


def refuse_if(nbytes: int, what: str, fix: str, available: int | None = None) -> None:
    """check_fits with the whole fix spelled out (`fix`: "give --data a smaller file")."""
    which = None
    if available is None:
        limits = memory_limits()
        if limits:
            which = min(limits, key=limits.get)
            available = limits[which]
    if available is None:
        return
    if nbytes > USABLE_FRACTION * available:
        under = "" if which is None or which.startswith("the machine") else f" under {which}"
        raise ResourceError(
            f"{what} needs about {_gb(nbytes)} of memory but {_gb(available)} is available{under}: {fix}"
        )
