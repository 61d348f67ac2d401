"""A disk that fills up during a checkpoint save, through the whole `wse train` command: the
child's checkpoint file writes from step 2 on fail with ENOSPC (a sitecustomize installed only
in that child wraps etils' file open, which orbax writes every step's metadata through). The
run stops with one line naming the disk, the bytes needed and the last good step, exit 1, no
traceback; step 1 stays intact and a second run resumes from it."""

import subprocess
import textwrap

import pytest
import yaml
from wse_cli.testing import WSE, clean_env
from wse_trainer.checkpoints import Checkpointer
from wse_trainer.metrics import read_metrics
from wse_trainer.testing import tiny_params, write_corpus

ENOSPC_SITE = textwrap.dedent(
    """
    import errno, os, re

    _FROM = int(os.environ["WSE_TEST_ENOSPC_FROM_STEP"])
    _STEP = re.compile(r"/checkpoints/(\\d+)(?:\\.orbax-checkpoint-tmp[^/]*)?/")

    def _install():
        from etils.epath import gpath

        real_open = gpath._GPath.open

        def open_(self, mode="r", *args, **kwargs):
            m = _STEP.search(str(self))
            if any(c in mode for c in "wax") and m and int(m.group(1)) >= _FROM:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
            return real_open(self, mode, *args, **kwargs)

        gpath._GPath.open = open_

    _install()
    """
)


def _train(params, env):
    return subprocess.run(
        WSE + ["train", str(params)], capture_output=True, text=True, timeout=900, env=env
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_full_disk_during_a_save_stops_wse_train_with_one_line(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(ENOSPC_SITE)
    data = tiny_params(write_corpus(tmp_path / "data"), tmp_path / "run")
    data["runconfig"].update(checkpoint_steps=1, max_steps=4, sample_tokens=0)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(data))
    env = clean_env(WSE_DEVICES="1", WSE_TEST_ENOSPC_FROM_STEP="2")
    env["PYTHONPATH"] = f"{site}:{env.get('PYTHONPATH', '')}"

    full = _train(params, env)
    # orbax's own advice before the fault ("Waiting for previous save to complete took 2 s",
    # on a loaded machine) may precede it; the fault itself is the one other line
    lines = [x for x in full.stderr.splitlines() if x.strip() and not x.startswith("WARNING:absl")]
    err = lines[-1] if lines else ""
    assert full.returncode == 1, full.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert err.startswith("Error: checkpoint step 2 could not be written to ")
    assert str(tmp_path / "run" / "checkpoints") in err and "No space left on device" in err
    assert "free on that disk, the state needs about" in err and "KiB" in err
    assert err.endswith("last good checkpoint: step 1"), err
    steps = [m["step"] for m in read_metrics(tmp_path / "run") if m["mode"] == "train"]
    assert steps[:2] == [1, 2] and max(steps) <= 3  # stopped at the next step at the latest
    assert not (tmp_path / "run" / "hf").exists()
    ckpt = Checkpointer(tmp_path / "run" / "checkpoints", read_only=True)
    try:
        assert ckpt.all_steps() == [1]
    finally:
        ckpt.close()

    data["runconfig"]["max_steps"] = 2
    params.write_text(yaml.safe_dump(data))
    again = _train(params, clean_env(WSE_DEVICES="1"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from checkpoint step 1" in again.stdout, again.stdout[-2000:]
    assert (tmp_path / "run" / "hf").is_dir()
