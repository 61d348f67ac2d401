"""Hunt 65 on the process around a run (`wse_core.host.atomic`, `runtime`, `jax_env`,
`distributed`, `pe_ffi`, `write_experiment`). Broken before:

- a SIGTERM between two of `write_experiment`'s renames left a new figure beside an older
  run's results.json (3 of 3 tries);
- SIGHUP while a file was written left its `.NAME.xxxx.part.EXT`; a stopped or failed first
  write left the folders made for it (an empty `ex/` or `ex/wafer-yield/`);
- under `umask 222` every write was a PermissionError traceback: the temporary file was made
  read-only by the umask, then reopened by name for writing;
- NUMBA_NUM_THREADS=100000 crashed the process (SIGSEGV), 0 / abc / an unknown
  NUMBA_THREADING_LAYER were tracebacks at the first kernel or numba's own warning;
- JAX_ENABLE_X64=maybe, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=abc and XLA_FLAGS'
  device count `abc` were tracebacks or XLA's 94-line flag list; JAX_PLATFORMS=gpu named
  'rocm';
- XLA_FLAGS=--xla_force_host_platform_device_count=8 was silently replaced by one device a
  core;
- `configure(10**5)` hung JAX's start at 3 GB; `configure(2.5)` / `configure(True)` left a
  JAX_NUM_CPU_DEVICES that `import jax` refused;
- SLURM_JOB_ID / SLURM_NTASKS=2 without srun (a `salloc` shell) or OMPI_COMM_WORLD_SIZE=2
  without mpirun was taken for a launch: JAX's 70-line "coordinator_address should be
  defined".
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from wse_core.errors import WseError  # noqa: E402
from wse_core.host import atomic, distributed, jax_env, pe_ffi, runtime  # noqa: E402
from wse_core.host.atomic import atomic_path  # noqa: E402
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment  # noqa: E402

pytestmark = pytest.mark.timeout(120)

HELPERS = """
import os, signal, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from wse_core.host import atomic
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment

def result(seed):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, seed + 1])
    return ExperimentResult("exp", seed, {}, [], [PredictionRow("t", seed + 1.0, "s", {})], fig)
"""
STOPPED = (
    HELPERS
    + """
new, stop = result(1), lambda: os.kill(os.getpid(), signal.SIGTERM)
if sys.argv[2] == "writing":  # the figure is written, the folder not yet swapped in
    save = new.figure.savefig
    new.figure.savefig = lambda *a, **k: (save(*a, **k), stop())
else:  # the signal comes as the swap starts: it waits until the swap is done
    swap = atomic._exchange
    atomic._exchange = lambda a, b: (stop(), swap(a, b))
write_experiment(new, sys.argv[1])
print("not stopped")
"""
)


def _result(seed: int) -> ExperimentResult:
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, seed + 1])
    return ExperimentResult("exp", seed, {}, [], [PredictionRow("t", seed + 1.0, "s", {})], fig)


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("when", ["writing", "swapping"])
def test_sigterm_leaves_one_whole_bundle_the_old_or_the_new(tmp_path, when):
    old = write_experiment(_result(0), tmp_path / "out")
    (old / "sweep_clock_hz.md").write_text("a sweep")  # no run's: carried over
    before = _files(old)
    new = _files(write_experiment(_result(1), tmp_path / "ref"))
    proc = subprocess.run([sys.executable, "-c", STOPPED, str(tmp_path / "out"), when],
                          capture_output=True, text=True, timeout=100)  # fmt: skip
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-2000:]
    assert proc.stderr == "stopped (SIGTERM); the files being written were left as they were\n"
    assert os.listdir(tmp_path / "out") == ["exp"]  # no temporary folder left
    now = _files(old)
    if when == "writing":
        assert now == before
    else:  # every file the new run's (the figure's bytes too), the sweep's kept
        assert now == {**new, "sweep_clock_hz.md": b"a sweep"}


def test_without_renameat2_the_bundle_is_swapped_by_renames(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_renameat2", lambda: None)  # macOS, an old C library
    folder = write_experiment(_result(0), tmp_path)
    (folder / "notes").mkdir()  # a folder cannot be linked: moved after the swap
    write_experiment(_result(1), tmp_path)
    assert '"seed": 1' in (folder / "results.json").read_text()
    assert (folder / "notes").is_dir() and os.listdir(tmp_path) == ["exp"]


HANG_UP = """
import sys, time
from wse_core.host.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_sighup_while_writing_removes_the_temporary_and_the_folders_made(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HANG_UP, str(tmp_path / "a" / "b" / "x.png")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline() == "writing\n"
    assert len(os.listdir(tmp_path / "a" / "b")) == 1  # the .part file
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGHUP  # as SIGHUP's default: 129 in a shell
    assert err == "stopped (SIGHUP); the files being written were left as they were\n"
    assert os.listdir(tmp_path) == []


def test_ctrl_c_or_a_failure_leaves_no_folder_it_made(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "a" / "b" / "x.png") as tmp:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt
    result = _result(0)
    result.figure.savefig = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_experiment(result, tmp_path / "ex")
    assert os.listdir(tmp_path) == []  # was: an empty ex/ (and a/b/ before hunt 64)


def test_under_umask_222_the_write_succeeds_and_the_file_is_read_only(tmp_path):
    seen = []
    old = os.umask(0o222)
    try:
        with atomic_path(tmp_path / "sub" / "x.bin") as tmp:
            seen.append(stat.S_IMODE(tmp.stat().st_mode))
            tmp.write_bytes(b"x")  # reopened by name, as np.savez and savefig do
    finally:
        os.umask(old)
    assert seen[0] & 0o600 == 0o600  # was 0o444: no writer could open it again (as a user)
    assert stat.S_IMODE((tmp_path / "sub" / "x.bin").stat().st_mode) == 0o444  # as `>` gives
    assert stat.S_IMODE((tmp_path / "sub").stat().st_mode) & 0o300 == 0o300  # as `mkdir -p`


AS_A_USER = (
    HELPERS
    + """
os.umask(0o222)
folder = write_experiment(result(0), sys.argv[1])
write_experiment(result(1), sys.argv[1])
print(sorted(oct(os.stat(folder / n).st_mode & 0o777) for n in os.listdir(folder)))
"""
)


def test_under_umask_222_an_experiment_is_written_twice_as_a_user(tmp_path):
    prefix = []  # root passes every permission check: drop that for the child, as a user has
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to run as a user would")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    proc = subprocess.run([*prefix, sys.executable, "-c", AS_A_USER, str(tmp_path / "ex")],
                          capture_output=True, text=True, timeout=100)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(["0o444"] * 4)  # results, tables, figure: read-only


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"NUMBA_NUM_THREADS": "100000"}, "NUMBA_NUM_THREADS must be an integer in [1, {cap:,}] "
         "(threads of the PE kernels), or unset it for one a core; got '100000'"),
        ({"NUMBA_NUM_THREADS": "0"}, "NUMBA_NUM_THREADS must be an integer in [1, {cap:,}] "
         "(threads of the PE kernels), or unset it for one a core; got '0'"),
        ({"NUMBA_NUM_THREADS": "abc"}, "NUMBA_NUM_THREADS must be an integer in [1, {cap:,}] "
         "(threads of the PE kernels), or unset it for one a core; got 'abc'"),
        ({"NUMBA_THREADING_LAYER": "bogus"}, "NUMBA_THREADING_LAYER must be one of default, "
         "safe, threadsafe, forksafe, tbb, omp, workqueue (numba's threading layers), or "
         "unset it; got 'bogus'"),
    ],
)  # fmt: skip
def test_numba_variables_it_cannot_start_with_are_refused_in_one_line(monkeypatch, env, line):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(WseError) as e:
        pe_ffi.available()
    assert str(e.value) == line.format(cap=max(1024, os.cpu_count() or 1))


def test_numba_variables_it_can_start_with_pass(monkeypatch):
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    monkeypatch.setenv("NUMBA_THREADING_LAYER", "OMP")  # numba lowercases it
    assert pe_ffi.available()


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"JAX_ENABLE_X64": "maybe"}, "JAX_ENABLE_X64 must be a truth value (1/0, true/false, "
         "yes/no, on/off), or unset; got 'maybe'"),
        ({"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "abc"}, "JAX_PERSISTENT_CACHE_MIN_"
         "COMPILE_TIME_SECS must be a number, or unset; got 'abc'"),
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=abc"}, "XLA_FLAGS' "
         "--xla_force_host_platform_device_count must be a positive integer of virtual CPU "
         "devices (or give --devices / WSE_DEVICES instead); got 'abc'"),
        ({"JAX_TRACEBACK_FILTERING": "bogus"}, "JAX_TRACEBACK_FILTERING must be one of off, "
         "tracebackhide, remove_frames, quiet_remove_frames, auto, or unset; got 'bogus'"),
    ],
)  # fmt: skip
def test_jax_variables_it_cannot_start_with_are_refused_before_the_environment_changes(
    monkeypatch, env, line
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = dict(os.environ)
    with pytest.raises(WseError) as e:
        runtime.configure(8)
    assert str(e.value) == line and dict(os.environ) == before


def test_jax_platforms_gpu_without_a_gpu_plugin_names_no_other_backend():
    if any("cuda" in p or "rocm" in p for p in jax_env._plugins()):
        pytest.skip("a JAX GPU plugin is installed here")
    with pytest.raises(WseError) as e:
        jax_env.check({"JAX_PLATFORMS": "gpu"})
    assert str(e.value) == (
        "JAX cannot start JAX_PLATFORMS='gpu' on this machine; set JAX_PLATFORMS=cpu or unset "
        "it (it asks for a GPU, and no JAX GPU plugin is installed here: pip install "
        "'jax[cuda12]')"
    )  # was: "Unable to initialize backend 'rocm'"
    jax_env.check({"JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "On"})  # JAX reads these


def test_the_jax_table_reads_each_variable_as_jax_does(monkeypatch):
    from jax._src import config as jax_config

    for name, kind in jax_env.JAX_OPTIONS.items():
        jax_kind, _, extra = jax_config.config.meta[name.lower()]
        if isinstance(kind, tuple):
            assert (jax_kind, tuple(extra["enum_values"])) == ("enum", kind), name
        else:
            assert jax_kind is kind, name
    for word in [*jax_env.TRUTH_VALUES, "TRUE", "Off", "maybe", "2", "", " 1"]:
        monkeypatch.setenv("WSE_TEST_TRUTH", word)
        try:
            jax_config.bool_env("WSE_TEST_TRUTH", False)
            jax_reads = True
        except ValueError:
            jax_reads = False
        ours = jax_env._unreadable(word, bool) is None
        assert ours == jax_reads, word


def test_xla_flags_device_count_is_honoured_unless_devices_are_given(monkeypatch):
    monkeypatch.delenv("WSE_DEVICES", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3 --xla_dump_to=x "
                                    "--xla_force_host_platform_device_count=5")  # fmt: skip
    assert runtime.default_devices() == 5  # XLA's last one; was one a core
    monkeypatch.setenv("WSE_DEVICES", "4")
    assert runtime.default_devices() == 4


@pytest.mark.parametrize(
    ("devices", "got"), [(10**5, "100000"), (2.5, "2.5"), (True, "True"), ("4", "'4'"), (0, "0")]
)
def test_configure_refuses_a_device_count_before_touching_the_environment(devices, got):
    from wse_core.host.limits import limit

    before = dict(os.environ)
    with pytest.raises(WseError) as e:
        runtime.configure(devices)
    assert str(e.value) == (
        f"devices must be an integer in 1..{limit('devices'):,}, got {got} (virtual CPU "
        "devices: each costs ~1.2 MB of host memory and slows JAX's start; set "
        "WSE_LIMIT_DEVICES to lift it)"
    )
    assert dict(os.environ) == before


SALLOC = {"SLURM_JOB_ID": "123", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "localhost"}
SRUN = {**SALLOC, "SLURM_STEP_NODELIST": "localhost", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}
MPIRUN = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1",
          "OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1"}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "launched"),
    [
        (SALLOC, False),  # a shell in an allocation: was a launch, JAX's 70-line traceback
        ({"OMPI_COMM_WORLD_SIZE": "2"}, False),
        (SRUN, True),
        ({**SRUN, "SLURM_NTASKS": "1"}, False),
        (MPIRUN, True),
    ],
)
def test_a_launch_is_detected_as_jax_detects_it(monkeypatch, env, launched):
    from jax._src.clusters import OmpiCluster, SlurmCluster

    for key in [k for k in os.environ if k.startswith(("SLURM_", "OMPI_", "PMI_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert distributed.cluster_detected() == launched
    jax_sees = SlurmCluster.is_env_present() or OmpiCluster.is_env_present()
    assert launched == (jax_sees and int(env.get("SLURM_NTASKS", 2)) > 1)
