"""Multi-process runs on JAX's own multi-controller runtime (`jax.distributed`).

One program runs in N processes; each owns some devices, and the wafer's mesh spans all of
them (a field's blocks live on every process's devices). `initialize` connects the processes:

- explicitly, from `num_processes`, `process_id` and `coordinator` ("HOST:PORT"), as the CLI
  flags `--num-processes --process-id --coordinator` or the environment variables
  `WSE_NUM_PROCESSES`, `WSE_PROCESS_ID`, `WSE_COORDINATOR` (which `wse launch` sets; an
  empty one is unset, as click reads every variable);
- or, with none of them given, from a cluster launcher's environment (SLURM, Open MPI, …) the
  way `jax.distributed.initialize()` detects it, where this process is one of several tasks a
  launcher started (`cluster_detected`: srun's SLURM_STEP_NODELIST, SLURM_PROCID, ...);
- or not at all: a single process, nothing to do. A shell inside an allocation (`salloc -n
  2`, an sbatch script) holds SLURM_JOB_ID and SLURM_NTASKS=2 but is no task of a step: a
  command run there is one process, as any program run there is (hunt 65: every JAX
  command died there after 4 s with JAX's 70-line "coordinator_address should be defined").

`asked` checks what was asked without JAX (a `WseError` naming the flag or variable that
holds the bad value: hunt 71, SLURM_PROCID=abc and 5,000-digit ports were tracebacks): the
process count within the limit of one run (`run_processes`, not `wse launch --nproc`'s one
host's cores: a run spans hosts; hunt 71: 2**31-1 took 3 GB in process 0's coordination
service before any peer came), the index within it, a
coordinator a process can name. `initialize` then meets the other processes
(`wse_core.host.rendezvous`: a host that resolves, a free port in process 0, a join bounded
by `init_timeout_s` with one line and exit 1, every process's count process 0's).

A peer that dies does not raise in the others: JAX aborts them natively (absl's LOG(QFATAL),
SIGABRT, with its log lines) after the heartbeat timeout, which we shorten to
`heartbeat_timeout_s` (default 30 s) so a run never hangs for long, or at once when process
0 is gone. No Python code can catch that: `jax.distributed.initialize` takes no
`missed_heartbeat_callback`, and jaxlib's `get_distributed_runtime_client` that does cannot
call a Python one (it has no conversion of the absl::Status: `std::bad_cast`, then
std::terminate, in jaxlib 0.10.2). `wse launch` watches its children and, when one fails,
stops the rest and says one line. Only the primary process (index 0) writes logs, metrics
and files meant for people.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import NamedTuple

from wse_core.errors import WseError, ascii_only, shown
from wse_core.host import rendezvous

__all__ = [
    "ProcessInfo",
    "Run",
    "FLAGS",
    "VARIABLES",
    "asked",
    "cluster_run",
    "initialize",
    "from_env",
    "is_primary",
    "barrier",
    "cluster_detected",
]

FLAGS = ("--num-processes", "--process-id", "--coordinator")
VARIABLES = ("WSE_NUM_PROCESSES", "WSE_PROCESS_ID", "WSE_COORDINATOR")
JAX_GRACE_S = 30  # JAX's own join timeout runs this much past ours, so ours speaks first
_DIGITS = 18  # the longest count or index read: past it, int() of 4,300 digits raises


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    num_processes: int
    process_id: int
    coordinator: str | None

    @property
    def is_primary(self) -> bool:
        return self.process_id == 0


class Run(NamedTuple):
    """A multi-process run asked for, checked: `names` says what asked for the count, the
    index and the coordinator (flags, WSE_* variables or a cluster launcher's), the words
    its refusals use; `launcher` is "SLURM" or "Open MPI" for a run one started."""

    num_processes: int
    process_id: int
    coordinator: str | None
    names: tuple[str, str, str] = FLAGS
    launcher: str | None = None


def from_env() -> tuple[int | None, int | None, str | None]:
    """The (num_processes, process_id, coordinator) that WSE_* variables ask for (an empty
    one is unset, as click reads a variable: hunt 71, WSE_COORDINATOR= refused every command)."""

    def _int(name: str) -> int | None:
        value = os.environ.get(name)
        if not value:
            return None
        try:
            return int(ascii_only(value))  # hunt 61: '١' was read as 1
        except ValueError:  # not an integer, or past int()'s 4,300 digits
            raise WseError(f"{name} must be an integer, got {shown(value)}") from None

    coordinator = os.environ.get("WSE_COORDINATOR") or None
    return _int("WSE_NUM_PROCESSES"), _int("WSE_PROCESS_ID"), coordinator


def asked(
    num_processes: int | None = None,
    process_id: int | None = None,
    coordinator: str | None = None,
    *,
    names: tuple[str, str, str] | None = None,
) -> Run | None:
    """The run asked for, by the arguments, else the WSE_* variables, else a cluster
    launcher's environment, checked without JAX (a `WseError`); None for a single process
    asked for nothing. `names`: what set each argument (default: its flag where given, else
    its variable), for the refusals."""
    env_n, env_i, env_c = from_env()
    n = num_processes if num_processes is not None else env_n
    i = process_id if process_id is not None else env_i
    c = coordinator if coordinator is not None else env_c
    if names is None:
        given = (num_processes, process_id, coordinator)
        pick = [f if g is not None else v for f, v, g in zip(FLAGS, VARIABLES, given, strict=True)]
        names = (pick[0], pick[1], pick[2])
    if (n, i, c) == (None, None, None):
        return cluster_run()
    if n is None or i is None:
        raise WseError(_half_asked((n, i, c), names))
    _validate(n, i, c, names)
    return Run(n, i, c, names)


def _half_asked(
    values: tuple[int | None, int | None, str | None], names: tuple[str, str, str]
) -> str:
    """Why a count without an index (or the reverse, or a coordinator alone) is no run."""
    have = [k for k in range(3) if values[k] is not None]
    env = not names[have[0]].startswith("-")
    family = VARIABLES if env else FLAGS
    missing = [family[k] for k in (0, 1) if values[k] is None]
    had = " and ".join(rendezvous.said(names[k], shown(values[k], quote=False)) for k in have)
    verb = ("is", "are")[len(have) > 1], ("is", "are")[len(missing) > 1]
    if env:
        fix = "set both (and WSE_COORDINATOR)" if len(missing) == 1 else "set them too"
        unset = " and ".join(names[k] for k in have)
        lacking = " and ".join(missing)
        return f"{had} {verb[0]} set but {lacking} {verb[1]} not; {fix}, or unset {unset}"
    return (
        f"{had} {verb[0]} given without {' and '.join(missing)}; a multi-process run needs "
        "--num-processes and --process-id together (and --coordinator)"
    )


def _validate(n: int, i: int, c: str | None, names: tuple[str, str, str]) -> None:
    if n <= 0:
        raise WseError(f"{names[0]} must be positive, got {n}")
    _check_count(n, names[0])
    if not 0 <= i < n:
        raise WseError(f"{names[1]} must be in 0..{n - 1}, got {i}")
    if n > 1 or c is not None:  # garbage is refused even when unused
        _check_coordinator(c, names[2])


def _check_count(n: int, name: str) -> None:
    """The count within `run_processes`: process 0's coordination service allocates for
    every process before any joins (hunt 71: 2^31 - 1 passed 3 GB in 11 s). Not `processes`,
    `wse launch --nproc`'s bound of one host's cores: a run spans hosts (`srun -N 4 -n 32`)."""
    from wse_core.host.limits import lift, limit

    if n > (cap := limit("run_processes")):
        raise WseError(
            f"{name} is {n:,}, over the limit of {cap:,} processes of one run; "
            f"{lift('run_processes')}"
        )


_HOST_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _check_coordinator(coordinator: str | None, name: str = "--coordinator") -> None:
    """HOST:PORT with a port in [1, 65535] and a host that can name a machine: a hostname, an
    IPv4 address or a bracketed IPv6 one. Port 0 and 256.1.1.1 waited 120 s for a process 0
    that no process could reach (hunt 57)."""
    import ipaddress

    host, sep, port = (coordinator or "").rpartition(":")
    wanted = f"{name} must be HOST:PORT (e.g. 127.0.0.1:12345), got {shown(coordinator)}"
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise WseError(wanted)
    if len(port) > 5 or not 1 <= int(port) <= 65535:  # hunt 71: int() of 5,000 digits raised
        raise WseError(f"{wanted}: the port must be in [1, 65535]")
    try:
        if host.startswith("["):
            if not host.endswith("]"):
                raise ValueError(host)
            ipaddress.IPv6Address(host[1:-1])
        elif all(c.isdigit() or c == "." for c in host):
            ipaddress.IPv4Address(host)
        elif len(host) > 253 or not all(_HOST_LABEL.fullmatch(x) for x in host.split(".")):
            raise ValueError(host)
    except ValueError:
        raise WseError(
            f"{wanted}: {shown(host)} is no hostname, IPv4 address or [IPv6] address"
        ) from None


# What jax/_src/clusters' SlurmCluster (srun) and OmpiCluster (Open MPI 4's mpirun) join
# with, the task count, this task's index and its index on its node first: JAX detects a
# launch only when all are set.
_LAUNCHED = {
    "SLURM": ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_JOB_ID",
              "SLURM_STEP_NODELIST"),
    "Open MPI": ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_MCA_orte_hnp_uri"),
}  # fmt: skip


def cluster_detected() -> bool:
    """True when a cluster launcher started this process as one of several tasks: JAX's own
    test of a SLURM step's or Open MPI run's environment (`is_env_present` of jax's
    SlurmCluster / OmpiCluster: every variable it joins with is set), with more than one
    task. A shell or batch script inside an allocation is none (module doc)."""
    return _launcher() is not None


def _launcher() -> str | None:
    for launcher, needed in _LAUNCHED.items():
        if all(name in os.environ for name in needed) and _tasks(needed[0]) > 1:
            return launcher
    return None


def _tasks(name: str) -> int:
    """A task count as JAX reads it; text that is no count is one task (SLURM_NTASKS=-2 runs
    as one process), and one too long to read is many (`cluster_run` refuses it)."""
    value = os.environ.get(name, "")
    if not (value.isascii() and value.isdigit()):
        return 1
    return int(value) if len(value) <= _DIGITS else 2**63


def _index(name: str) -> int | None:
    value = os.environ[name]
    ok = value.isascii() and value.isdigit() and len(value) <= _DIGITS
    return int(value) if ok else None


def cluster_run() -> Run | None:
    """The run a cluster launcher started this process in (`cluster_detected`; None where
    none did), its variables checked as JAX will read them: a `WseError` naming the variable
    (hunt 71: SLURM_JOB_ID=abc, SLURM_PROCID=5 of 2 and 5,000-digit counts were tracebacks
    after JAX's import, and a SLURM_STEP_NODELIST of '[' a 127-s wait and SIGABRT)."""
    launcher = _launcher()
    if launcher is None:
        return None
    count, rank, local, *_ = _LAUNCHED[launcher]
    if len(raw := os.environ[count]) > _DIGITS:
        raise WseError(f"{count} must be a task count, got {shown(raw)}")
    n = int(raw)
    _check_count(n, count)
    i = _index(rank)
    if i is None or i >= n:
        where = "step" if launcher == "SLURM" else "run"
        got = shown(os.environ[rank], quote=False)
        raise WseError(f"{rank}={got} is not a task of this {where} ({count}={n}: 0..{n - 1})")
    if _index(local) is None:
        got = shown(os.environ[local])
        raise WseError(f"{local} must be this task's index on its node, got {got}")
    where, coordinator = _slurm_coordinator() if launcher == "SLURM" else _ompi_coordinator()
    return Run(n, i, coordinator, (count, rank, where), launcher)


def _slurm_coordinator() -> tuple[str, str]:
    """(the variable, HOST:PORT) of process 0 as jax's SlurmCluster finds it: the step's
    first node, and a port from the job's id."""
    job = os.environ["SLURM_JOB_ID"]
    if _index("SLURM_JOB_ID") is None:
        raise WseError(f"SLURM_JOB_ID must be an integer, got {shown(job)}")
    nodes = os.environ["SLURM_STEP_NODELIST"]
    host = _first_node(nodes)
    coordinator = f"{host}:{int(job) % 2**12 + 65535 - 2**12 + 1}"
    try:
        _check_coordinator(coordinator)
    except WseError:
        raise WseError(
            f"SLURM_STEP_NODELIST={shown(nodes)} names no host to join (its first node reads "
            f"as {shown(host)})"
        ) from None
    return "SLURM_STEP_NODELIST", coordinator


def _first_node(nodes: str) -> str:
    """The first host of a SLURM node list as jax's SlurmCluster reads it: 'node001',
    'node001,host2', 'node[001-015],host2' and 'node[001,007-015],host2' give node001."""
    cut = next((k for k, ch in enumerate(nodes) if ch in ",["), len(nodes))
    if cut == len(nodes) or nodes[cut] == ",":
        return nodes[:cut]
    return nodes[:cut] + re.split(r"[,-]", nodes[cut + 1 :], maxsplit=1)[0]


def _ompi_coordinator() -> tuple[str, str]:
    """(the variable, HOST:PORT) of process 0 as jax's OmpiCluster finds it in mpirun's URI."""
    uri = os.environ["OMPI_MCA_orte_hnp_uri"]
    found = re.search(r"tcp://(.+?)[,:]|tcp6://\[(.+?)[,\]]", uri)
    job = uri.split(".", maxsplit=1)[0]
    if found is None or not (job.isascii() and job.isdigit() and len(job) <= 2 * _DIGITS):
        raise WseError(
            f"OMPI_MCA_orte_hnp_uri={shown(uri)} is no Open MPI launcher's address "
            "(JOB.STEP;tcp://HOST:PORT)"
        )
    port = int(job) // 2**12 % 2**12 + 65535 - 2**12 + 1
    ip = found.group(1) or f"[{found.group(2)}]"
    return "OMPI_MCA_orte_hnp_uri", f"{ip}:{port}"


def initialize(
    num_processes: int | None = None,
    process_id: int | None = None,
    coordinator: str | None = None,
    *,
    init_timeout_s: int = 120,
    heartbeat_timeout_s: int = 30,
    names: tuple[str, str, str] | None = None,
) -> ProcessInfo:
    """Join the multi-process run (or do nothing for a single process); see the module doc.
    `names`: what set each argument, for the refusals (`asked`)."""
    run = asked(num_processes, process_id, coordinator, names=names)
    if run is not None and run.num_processes > 1:
        rendezvous.check_reachable(run)
    import jax

    # JAX's preemption service catches SIGTERM and only logs it (hunt 62: the processes of a
    # run outlived `kill`, `timeout` and SLURM's end of job); the stack saves no preemption
    # checkpoints through it, so SIGTERM stops a process as it stops a single one.
    if os.environ.get("JAX_ENABLE_PREEMPTION_SERVICE") is None:
        jax.config.update("jax_enable_preemption_service", False)
    if run is None or run.num_processes == 1:
        return ProcessInfo(1, 0, None if run is None else run.coordinator)
    join = functools.partial(
        jax.distributed.initialize,
        initialization_timeout=int(init_timeout_s) + JAX_GRACE_S,
        heartbeat_timeout_seconds=heartbeat_timeout_s,
    )
    with rendezvous.watched(run, init_timeout_s):
        if run.launcher is not None:  # JAX reads its variables (and the local devices) itself
            join()
        else:
            join(run.coordinator, run.num_processes, run.process_id)
    rendezvous.agree_on_count(run, init_timeout_s)
    return ProcessInfo(run.num_processes, run.process_id, run.coordinator)


def is_primary() -> bool:
    """True in process 0 (and in a single-process run)."""
    import jax

    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process of a multi-process run reaches `name` (no-op in one)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
