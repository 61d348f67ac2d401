"""Hunt 71: `wse_core.host.distributed` (and `rendezvous`) as a process joins a run. Broken
before:
- SLURM and Open MPI variables were read by JAX after its import, unchecked: SLURM_JOB_ID=abc,
  SLURM_PROCID=5 of 2 and 5,000-digit counts were tracebacks; a SLURM_STEP_NODELIST of '['
  waited 127 s, then JAX aborted the process;
- an empty WSE_COORDINATOR was a coordinator; a count of 2**31-1 took 3 GB in process 0;
- a coordinator host that does not resolve waited 135 s, and a port another program held was
  a SIGSEGV in process 0; a process 0 that never came was SIGABRT and 14 lines of absl log
  after 127 s, naming neither host nor port;
- a process started with another count than process 0's joined the run and exited 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from wse_core.errors import WseError
from wse_core.host import distributed, rendezvous
from wse_core.host.distributed import Run

SRUN = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost",
        "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}  # fmt: skip
MPIRUN = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1",
          "OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.96.0.1,10.148.0.1:34911"}  # fmt: skip


@pytest.fixture
def env(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("SLURM_", "OMPI_", "WSE_", "PMI_"))]:
        monkeypatch.delenv(key)

    def set_env(values: dict[str, str]) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key, value)

    return set_env


@pytest.mark.parametrize(
    "nodes", ["localhost", "node001,host2", "node[001-015],host2", "node[001,007-015],host2"]
)
def test_a_slurm_task_is_read_as_jax_reads_it(env, nodes):
    from jax._src.clusters import SlurmCluster

    env({**SRUN, "SLURM_STEP_NODELIST": nodes})
    run = distributed.cluster_run()
    expected = SlurmCluster.get_coordinator_address(None, None)  # JAX's own reading: the oracle
    assert run == Run(2, 1, expected, ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_STEP_NODELIST"),
                      "SLURM")  # fmt: skip


def test_an_open_mpi_rank_is_read_as_jax_reads_it(env):
    from jax._src.clusters import OmpiCluster

    env(MPIRUN)
    run = distributed.cluster_run()
    assert run is not None and (run.num_processes, run.process_id) == (2, 1)
    assert run.coordinator == OmpiCluster.get_coordinator_address(None, None)


@pytest.mark.parametrize(
    ("values", "line"),
    [
        ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID must be an integer, got 'abc'"),
        ({"SLURM_PROCID": "2"}, "SLURM_PROCID=2 is not a task of this step (SLURM_NTASKS=2: 0..1)"),
        ({"SLURM_NTASKS": "9" * 5000}, "SLURM_NTASKS must be a task count, got '"),
        ({"SLURM_STEP_NODELIST": "["}, "SLURM_STEP_NODELIST='[' names no host to join"),
        ({"SLURM_JOB_ID": "1" * 5000}, "SLURM_JOB_ID must be an integer, got '"),
    ],
    ids=["job-id", "procid", "ntasks-digits", "nodelist", "job-id-digits"],
)  # fmt: skip
def test_bad_slurm_values_are_refused_before_jax(env, values, line):
    env({**SRUN, **values})
    with pytest.raises(WseError) as e:
        distributed.asked()
    assert str(e.value).startswith(line), str(e.value)


def test_an_open_mpi_uri_without_an_address_is_refused(env):
    env({**MPIRUN, "OMPI_MCA_orte_hnp_uri": "x"})
    with pytest.raises(WseError, match="OMPI_MCA_orte_hnp_uri='x' is no Open MPI launcher's"):
        distributed.asked()


def test_the_wse_variables_empty_are_unset_and_a_count_is_bounded(env):
    from wse_core.host.limits import limit

    env({"WSE_COORDINATOR": "", "WSE_NUM_PROCESSES": "", "WSE_PROCESS_ID": ""})
    assert distributed.asked() is None
    cap = limit("run_processes")  # not one host's cores: a run spans hosts
    env({"WSE_NUM_PROCESSES": str(cap + 1), "WSE_PROCESS_ID": "0",
         "WSE_COORDINATOR": "127.0.0.1:5"})  # fmt: skip
    with pytest.raises(WseError) as e:
        distributed.asked()
    assert str(e.value) == (
        f"WSE_NUM_PROCESSES is {cap + 1:,}, over the limit of {cap:,} processes of one run; "
        "set WSE_LIMIT_RUN_PROCESSES to lift it"
    )
    assert distributed.asked(cap, 0, "127.0.0.1:5") == Run(cap, 0, "127.0.0.1:5")
    # more processes than this host's cores: a run over hosts (srun -N 4 -n 32), not refused
    many = 16 * (os.cpu_count() or 1)
    assert distributed.asked(many, 0, "127.0.0.1:5") == Run(many, 0, "127.0.0.1:5")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_coordinator_that_cannot_be_reached_is_refused_before_the_join():
    run = Run(2, 1, "nosuchhost.invalid:23478")
    with pytest.raises(WseError, match="--coordinator host 'nosuchhost.invalid' does not resolve"):
        rendezvous.check_reachable(run)
    with socket.create_server(("127.0.0.1", 0)) as held:  # another program's port
        port = held.getsockname()[1]
        rendezvous.check_reachable(Run(2, 1, f"127.0.0.1:{port}"))  # process 1 binds nothing
        with pytest.raises(WseError) as e:
            rendezvous.check_reachable(Run(2, 0, f"127.0.0.1:{port}"))
    assert str(e.value) == (f"--coordinator port {port} is in use by another program (Address "
                            "already in use); give a free port")  # fmt: skip


JOIN = """
    import sys
    from wse_core.errors import WseError
    from wse_core.host import distributed
    n, i, coordinator, timeout_s = sys.argv[1:]
    try:
        distributed.initialize(int(n), int(i), coordinator, init_timeout_s=int(timeout_s))
    except WseError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(2)
    print("joined")
"""


def _join(n: int, i: int, coordinator: str, timeout_s: int = 30) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WSE_LIMIT_PROCESSES": "4"}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(JOIN), str(n), str(i), coordinator, str(timeout_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


@pytest.mark.timeout(60)
def test_a_coordinator_that_never_comes_ends_the_process_in_one_line():
    coordinator = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    out, err = _join(2, 1, coordinator, timeout_s=2).communicate(timeout=50)
    assert err.splitlines() == [
        f"Error: no coordinator answered at {coordinator} within 2 s (is process 0 running?)"
    ], err[-2000:]
    assert time.monotonic() - started < 20  # JAX's import and 2 s, not JAX's 32 s


@pytest.mark.timeout(60)
def test_processes_started_with_different_counts_all_refuse():
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = [_join(2, 0, coordinator), _join(3, 1, coordinator)]
    done = [p.communicate(timeout=50) for p in procs]
    line = ("Error: process 1 was started with --num-processes 3, but the coordinator "
            "(process 0) runs 2")  # fmt: skip
    for p, (out, err) in zip(procs, done, strict=True):
        assert (p.returncode, out, err.splitlines()) == (2, "", [line]), err[-2000:]
