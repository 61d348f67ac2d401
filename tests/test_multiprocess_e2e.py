"""The same `wse` runs on 2 processes x 4 devices (jax.distributed on loopback) as on one
process with 8 devices: one global 8-device mesh either way (for training: 8 replicas,
split 4 + 4 over the processes)."""

import subprocess

import numpy as np
import pytest
from wse_cli.testing import WSE, clean_env, invoke, launch_json, run_json

STENCIL = ["hpc", "stencil", "--grid", "16", "12", "8", "--preset", "small", "--json"]


@pytest.mark.timeout(300)
def test_heat_stencil_is_bit_identical_across_processes():
    args = STENCIL + ["--kind", "heat", "--steps", "30"]
    one, two = run_json(args), launch_json(args)
    assert one["emulated_wafer"]["mesh"] == two["emulated_wafer"]["mesh"]
    assert one["history"] == two["history"]  # only data movement: exact
    assert one["final"] == two["final"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bicgstab_converges_the_same_across_processes():
    args = STENCIL + ["--kind", "bicgstab", "--steps", "20", "--dtype", "fp32"]
    one, two = run_json(args), launch_json(args)
    a, b = np.array(one["history"])[:, 1], np.array(two["history"])[:, 1]
    # Dot products are psums whose order differs between 1 and 2 processes: fp32 round-off
    # only (~1e-7 per step), amplified by the Krylov recurrence: 1e-4 by iteration 7.
    np.testing.assert_allclose(a[:8], b[:8], rtol=1e-3)
    assert one["final"]["true_residual"] < 1e-5 and two["final"]["true_residual"] < 1e-5


@pytest.mark.timeout(400)
def test_md_run_is_bit_identical_across_processes(tmp_path):
    import typer
    from wse_cli.app import app

    pot = tmp_path / "Cu.eam.alloy"  # written in this process: the two runs are what is tested
    code, output = invoke(typer.main.get_command(app), ["hpc", "md", "potential", "--elements",
                                                        "Cu", "--out", pot])  # fmt: skip
    assert code == 0, output
    args = [
        "hpc",
        "md",
        "--lattice",
        "fcc",
        "--element",
        "Cu",
        "--a",
        "3.615",
        "--cells",
        "4",
        "4",
        "4",
        "--potential",
        str(pot),
        "--steps",
        "20",
        "--thermo-every",
        "5",
        "--temperature-K",
        "300",
        "--preset",
        "small",
        "--mesh",  # one 2 x 4 mesh either way (one process alone would take one device)
        "2",
        "4",
        "--json",
    ]
    one, two = run_json(args), launch_json(args)
    assert one["grid"] == two["grid"] and one["atoms"] == two["atoms"] == 256
    assert one["thermo"] == two["thermo"]  # energies, temperature, pressure: bit-identical


def _train_params(tmp_path):
    """The tiny run with 8 replicas (one sequence each): 4 steps, a checkpoint every 2."""
    import yaml
    from wse_trainer.testing import tiny_params, write_corpus

    params = tiny_params(write_corpus(tmp_path / "data"), tmp_path / "unused")
    params["train_input"]["batch_size"] = params["eval_input"]["batch_size"] = 8
    params["runconfig"].update(num_csx=8, max_steps=4, checkpoint_steps=2)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _wse(args, env, timeout_s=300):
    done = subprocess.run(WSE + args, capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _trained(model_dir):
    import jax
    import wse_models
    from wse_trainer.metrics import read_metrics

    losses = [(m["step"], m["loss"]) for m in read_metrics(model_dir) if m["mode"] == "train"]
    params = jax.tree.leaves(wse_models.from_pretrained(model_dir / "hf").params())
    return losses, [np.asarray(p) for p in params]


_LAUNCH = ["launch", "--nproc", "2", "--devices-per-proc", "4", "--", "train"]


@pytest.mark.slow  # 28 s: the default suite keeps the heat stencil's and MD's equality
@pytest.mark.timeout(400)
def test_training_is_bit_identical_across_processes(tmp_path):
    # 1 process x 8 devices against 2 processes x 4 devices: SwarmX sums the 8 replicas'
    # gradients in replica order in either case: the same numbers, bit for bit.
    params = str(_train_params(tmp_path))
    one, two = tmp_path / "one", tmp_path / "two"
    _wse(["train", params, "-o", str(one)], clean_env(WSE_DEVICES="8"))
    out = _wse([*_LAUNCH, params, "-o", str(two)], clean_env())
    # Only process 0 prints and writes the logs.
    assert out.count("Step=4,") == 1 and (two / "run.log").read_text().count("Step=4,") == 1
    (l1, p1), (l2, p2) = _trained(one), _trained(two)
    assert l1 == l2 and [s for s, _ in l2] == [1, 2, 3, 4]
    assert max(float(np.abs(a - b).max()) for a, b in zip(p1, p2, strict=True)) == 0.0


@pytest.mark.timeout(120)
def test_replicas_that_do_not_split_over_the_processes_are_refused(tmp_path):
    params = str(_train_params(tmp_path))
    cmd = WSE + [*_LAUNCH, params, "-o", str(tmp_path / "run"), "--num_csx", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=110, env=clean_env())
    assert done.returncode == 2  # each process exits 2 with the one-line error; so does launch
    assert "num_csx=1 replicas cannot be split over 2 processes" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_resumes_across_processes(tmp_path):
    # 2 processes stopped after step 2 and resumed (both restore the orbax checkpoint both
    # saved) against 1 process x 8 devices uninterrupted: bit-identical.
    params = str(_train_params(tmp_path))
    one, two = tmp_path / "one", tmp_path / "two"
    _wse(["train", params, "-o", str(one)], clean_env(WSE_DEVICES="8"))
    first = _wse([*_LAUNCH, params, "-o", str(two), "--num_steps", "2"], clean_env())
    rest = _wse([*_LAUNCH, params, "-o", str(two)], clean_env())
    assert first.count("Step=2,") == 1 and "resumed from checkpoint step 2" in rest
    (l1, p1), (l2, p2) = _trained(one), _trained(two)
    assert l1 == l2 and [s for s, _ in l2] == [1, 2, 3, 4]
    assert max(float(np.abs(a - b).max()) for a, b in zip(p1, p2, strict=True)) == 0.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_dead_training_peer_stops_the_other_in_bounded_time(tmp_path):
    # No launcher watching: JAX's heartbeat (30 s, set by wse_core.host.distributed) must end the
    # survivor, with JAX's message naming the cause.
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model_dir = tmp_path / "run"
    args = ["train", str(_train_params(tmp_path)), "-o", str(model_dir), "--max_steps", "1000"]
    args += ["--num_processes", "2", "--coordinator", f"127.0.0.1:{port}", "--process_id"]
    procs = [
        subprocess.Popen(
            WSE + [*args, str(i)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(WSE_DEVICES="4"),
        )
        for i in range(2)
    ]
    try:
        log = model_dir / "run.log"
        deadline = time.monotonic() + 180
        while not (log.exists() and "Step=4," in log.read_text()):
            assert time.monotonic() < deadline and procs[0].poll() is None
            time.sleep(0.5)
        procs[1].kill()
        killed_at = time.monotonic()
        _, err = procs[0].communicate(timeout=90)
        assert time.monotonic() - killed_at < 60  # the 30 s heartbeat, plus slack
        assert procs[0].returncode != 0
        assert "another task died" in err or "heartbeat" in err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_swe_domain_translation_over_processes_equals_one_wafer():
    """Shallow water with Domain Translation on 2 processes x 4 devices (two systems) gives
    the one-process, one-wafer run's depth bit for bit."""
    args = ["hpc", "swe", "--n", "16", "--steps", "40", "--preset", "small", "--json"]
    one, two = run_json(args), launch_json(args + ["--domain-translation"])
    assert one["h"] == two["h"] and two["domain_translation"] is True
