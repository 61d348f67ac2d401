"""Multi-process runs on JAX's own multi-controller runtime (`jax.distributed`).

One program runs in N processes; each owns some devices, and the wafer's mesh spans all of
them (a field's blocks live on every process's devices). `initialize` connects the processes:

- explicitly, from `num_processes`, `process_id` and `coordinator` ("HOST:PORT"), as the CLI
  flags `--num-processes --process-id --coordinator` or the environment variables
  `WSE_NUM_PROCESSES`, `WSE_PROCESS_ID`, `WSE_COORDINATOR` (which `wse launch` sets);
- or, with none of them given, from a cluster launcher's environment (SLURM, Open MPI, …) the
  way `jax.distributed.initialize()` detects it, where this process is one of several tasks a
  launcher started (`cluster_detected`: srun's SLURM_STEP_NODELIST, SLURM_PROCID, ...);
- or not at all: a single process, nothing to do. A shell inside an allocation (`salloc -n
  2`, an sbatch script) holds SLURM_JOB_ID and SLURM_NTASKS=2 but is no task of a step: a
  command run there is one process, as any program run there is (hunt 65: every JAX
  command died there after 4 s with JAX's 70-line "coordinator_address should be defined").

A peer that dies does not raise in the others: JAX aborts them after the heartbeat timeout,
which we shorten to `heartbeat_timeout_s` (default 30 s) so a run never hangs for long;
`wse launch` also watches its children and stops the rest as soon as one fails.
Only the primary process (index 0) writes logs, metrics and files meant for people.
"""

from __future__ import annotations

import dataclasses
import os
import re

from wse_core.errors import WseError, ascii_only

__all__ = [
    "ProcessInfo",
    "initialize",
    "resolve",
    "from_env",
    "is_primary",
    "barrier",
    "cluster_detected",
]


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    num_processes: int
    process_id: int
    coordinator: str | None

    @property
    def is_primary(self) -> bool:
        return self.process_id == 0


def from_env() -> tuple[int | None, int | None, str | None]:
    """The (num_processes, process_id, coordinator) that WSE_* variables ask for."""

    def _int(name: str) -> int | None:
        value = os.environ.get(name)
        if not value:
            return None
        try:
            return int(ascii_only(value))  # hunt 61: '١' was read as 1
        except ValueError:
            raise WseError(f"{name} must be an integer, got {value!r}") from None

    return _int("WSE_NUM_PROCESSES"), _int("WSE_PROCESS_ID"), os.environ.get("WSE_COORDINATOR")


def cluster_detected() -> bool:
    """True when a cluster launcher started this process as one of several tasks: JAX's own
    test of a SLURM step's or Open MPI run's environment (`is_env_present` of jax's
    SlurmCluster / OmpiCluster: every variable it joins with is set), with more than one
    task. A shell or batch script inside an allocation is none (module doc)."""
    return any(
        all(name in os.environ for name in needed) and _tasks(needed[0]) > 1 for needed in _LAUNCHED
    )


# What jax/_src/clusters' SlurmCluster (srun) and OmpiCluster (Open MPI 4's mpirun) join
# with, the task count first: JAX detects a launch only when all are set.
_LAUNCHED = (
    ("SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_PROCID", "SLURM_LOCALID"),
    ("OMPI_COMM_WORLD_SIZE", "OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_LOCAL_RANK"),
)  # fmt: skip


def _tasks(name: str) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isascii() and value.isdigit() else 1


def _validate(num_processes: int, process_id: int, coordinator: str | None) -> None:
    if num_processes <= 0:
        raise WseError(f"--num-processes must be positive, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise WseError(f"--process-id must be in 0..{num_processes - 1}, got {process_id}")
    if num_processes > 1 or coordinator is not None:  # garbage is refused even when unused
        _check_coordinator(coordinator)


_HOST_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _check_coordinator(coordinator: str | None) -> None:
    """HOST:PORT with a port in [1, 65535] and a host that can name a machine: a hostname, an
    IPv4 address or a bracketed IPv6 one. Port 0 and 256.1.1.1 waited 120 s for a process 0
    that no process could reach (hunt 57)."""
    import ipaddress

    host, sep, port = (coordinator or "").rpartition(":")
    wanted = f"--coordinator must be HOST:PORT (e.g. 127.0.0.1:12345), got {coordinator!r}"
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise WseError(wanted)
    if not 1 <= int(port) <= 65535:
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
            f"{wanted}: {host!r} is no hostname, IPv4 address or [IPv6] address"
        ) from None


def resolve(
    num_processes: int | None = None,
    process_id: int | None = None,
    coordinator: str | None = None,
) -> tuple[int | None, int | None, str | None]:
    """The (num_processes, process_id, coordinator) asked for, by the arguments or else the
    WSE_* variables, checked (a `WseError` for a bad combination) without importing JAX."""
    env_n, env_i, env_c = from_env()
    n = num_processes if num_processes is not None else env_n
    i = process_id if process_id is not None else env_i
    c = coordinator if coordinator is not None else env_c
    if (n, i, c) != (None, None, None):
        if n is None or i is None:
            raise WseError("a multi-process run needs --num-processes and --process-id together")
        _validate(n, i, c)
    return n, i, c


def initialize(
    num_processes: int | None = None,
    process_id: int | None = None,
    coordinator: str | None = None,
    *,
    init_timeout_s: int = 120,
    heartbeat_timeout_s: int = 30,
) -> ProcessInfo:
    """Join the multi-process run (or do nothing for a single process); see the module doc."""
    n, i, c = resolve(num_processes, process_id, coordinator)
    import jax

    # JAX's preemption service catches SIGTERM and only logs it (hunt 62: the processes of a
    # run outlived `kill`, `timeout` and SLURM's end of job); the stack saves no preemption
    # checkpoints through it, so SIGTERM stops a process as it stops a single one.
    if os.environ.get("JAX_ENABLE_PREEMPTION_SERVICE") is None:
        jax.config.update("jax_enable_preemption_service", False)
    if n is None and i is None and c is None:
        if not cluster_detected():
            return ProcessInfo(1, 0, None)
        jax.distributed.initialize(
            initialization_timeout=init_timeout_s, heartbeat_timeout_seconds=heartbeat_timeout_s
        )
        return ProcessInfo(jax.process_count(), jax.process_index(), None)
    assert n is not None and i is not None  # resolve() refused the rest
    if n == 1:
        return ProcessInfo(1, 0, c)
    jax.distributed.initialize(
        coordinator_address=c,
        num_processes=n,
        process_id=i,
        initialization_timeout=init_timeout_s,
        heartbeat_timeout_seconds=heartbeat_timeout_s,
    )
    return ProcessInfo(n, i, c)


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
