"""The stack as a wheel: `python -m build` at the root, installed (not `-e`) in a fresh venv.

The venv sees this interpreter's site-packages (`--system-site-packages`) for the third-party
dependencies, and the wheel goes in with `--no-deps`, so nothing is downloaded; the checks
then prove that every package imports from the venv's copy (not from the editable checkout),
that the gRPC stubs came in the wheel (nothing is generated at first import), that the one
version of `wse_core/VERSION` is what the wheel and `wse --version` say, and that the demo's
first part runs from the installed code.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "wse_core",
    "wse_models",
    "wse_systems",
    "wse_trainer",
    "wse_inference",
    "wse_hpc",
    "wse_cli",
)

CHECK = """
import json, os, sys
from pathlib import Path
import wse_core, wse_models, wse_systems, wse_trainer, wse_inference, wse_hpc, wse_cli
from wse_inference.serve import proto
folder = Path(proto.__file__).parent
before = sorted(p.name for p in folder.iterdir())
pb2, pb2_grpc = proto.load_stubs()
after = sorted(p.name for p in folder.iterdir())
mods = (wse_core, wse_models, wse_systems, wse_trainer, wse_inference, wse_hpc, wse_cli)
print(json.dumps({
    "files": {m.__name__: m.__file__ for m in mods},
    "typed": [m.__name__ for m in mods if Path(m.__file__).with_name("py.typed").is_file()],
    "versions": [wse_core.__version__, wse_cli.__version__],
    "stubs": [pb2.__file__, pb2_grpc.__file__],
    "written": sorted(set(after) - set(before)),
}))
"""

DEMO_PART = """
from pathlib import Path
from rich.console import Console
from wse_cli.commands.demo import wafer_part
Path("demo").mkdir()
wafer_part(Console(width=200), out_dir=Path("demo"), quick=True)
"""


def _run(args, cwd, env):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv_and_runs(tmp_path):
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WSE_DEVICES")}
    env["JAX_PLATFORMS"] = "cpu"
    py = [sys.executable, "-m"]
    _run([*py, "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(ROOT)], ROOT, env)
    wheels = sorted((tmp_path / "dist").glob("wse_stack-*.whl"))
    sdists = sorted((tmp_path / "dist").glob("wse_stack-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    version = (ROOT / "packages/wse_core/src/wse_core/VERSION").read_text().strip()
    assert wheels[0].name == f"wse_stack-{version}-py3-none-any.whl"

    venv = tmp_path / "venv"
    _run([*py, "venv", "--system-site-packages", str(venv)], tmp_path, env)
    vpy = str(venv / "bin" / "python")
    _run([vpy, "-m", "pip", "install", "-q", "--no-deps", str(wheels[0])], tmp_path, env)
    got = json.loads(_run([vpy, "-c", CHECK], tmp_path, env).strip().splitlines()[-1])

    site = str(venv / "lib")
    for name in PACKAGES:  # the venv's copy, not the checkout the suite runs from
        assert got["files"][name].startswith(site), got["files"][name]
    assert sorted(got["typed"]) == sorted(PACKAGES)
    assert got["versions"] == [version, version]
    assert all(f.startswith(site) for f in got["stubs"]) and got["written"] == []

    out = _run([str(venv / "bin" / "wse"), "--version"], tmp_path, env)
    assert out.strip() == f"wse {version}"
    out = _run([vpy, "-c", DEMO_PART], tmp_path, env)
    err = float(out.split("max |error| vs NumPy ")[1].split(";")[0])
    # 64 x 96 PEs' N(0, 1) floats summed in float32 (sums ~ 80, |x| summed ~ 4,900): rounding
    # is ~ 4,900 * 6e-8 = 3e-4 at most; a wrong shift or a lost PE is off by ~1
    assert err < 3e-3
    assert (tmp_path / "demo" / "defects.png").stat().st_size > 0
