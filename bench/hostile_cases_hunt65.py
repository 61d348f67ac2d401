"""The CLI refusals of session 66 (hunt 65, each fixed), as `hostile_cases.Case`s whose commands
and messages are those of their tests: apps/cli/tests/test_cli_train_hunt65.py,
test_cli_launch_hunt65.py, test_cli_hpc_hunt65.py and test_cli_infer_hunt65.py. One case per
distinct refusal, each writing the files it needs into its own temporary folder. Select them
with `--only '(hunt 65)'`."""

from __future__ import annotations

import json
from pathlib import Path

from hostile_cases import Case, Fixtures, _const
from hostile_cases_found import _xyz
from hostile_cases_hunt62 import _generate

_TINY = ["train", "tiny", "model.vocab_size=300", "train_input.batch_size=2",
         "runconfig.sample_tokens=0"]  # fmt: skip
_LAUNCH = ["launch", "--nproc", "2"]
_CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "4", "--preset", "tiny"]


def _npy(tmp: Path) -> str:
    import numpy as np

    np.save(tmp / "m.npy", np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32))
    return str(tmp / "m.npy")


def _md(fx: Fixtures, tmp: Path, *extra: str) -> list[str]:
    return ["hpc", "md", "--structure", _xyz(tmp), "--potential", fx.potential(), *extra]


def hunt65_cases() -> list[Case]:
    """Session 66's refusals: each ran (or said nothing) on the code before (the note)."""
    return [
        Case("hunt65", "train --validate-only <missing data_dir> (hunt 65)", _const(
            *_TINY, "--validate-only", "train_input.data_dir=/nonexistent/data"),
            message="data file '/nonexistent/data' does not exist",
            note="printed 'config is valid', exit 0"),
        Case("hunt65", "train runconfig.validate_only=true <missing checkpoint> (hunt 65)", _const(
            *_TINY, "runconfig.validate_only=true", "--mode", "eval", "--checkpoint-path",
            "/nonexistent/ckpt"),
            message="no committed checkpoint at '/nonexistent/ckpt'",
            note="the key was never read: a valid config trained, saved and exported"),
        Case("hunt65", "launch -- --devices 2 (hunt 65)", _const(
            *_LAUNCH, "--devices-per-proc", "1", "--", "--devices", "2", "wafer", "check"),
            message="--devices is set by wse launch (--devices-per-proc); remove it",
            note="ran on 4 devices, not 2, and the memory check counted 1 per process"),
        Case("hunt65", "launch -- --num_processes 3 (hunt 65)", _const(
            *_LAUNCH, "--", "wafer", "check", "--num_processes", "3"),
            message="--num-processes is set by wse launch itself",
            note="the underscore spelling ran and its value was dropped"),
        Case("hunt65", "hpc cfd --output-every without --out (hunt 65)", _const(
            *_CFD, "--output-every", "2"),
            message="--output-every needs --out", note="ran 14 s and wrote nothing"),
        Case("hunt65", "hpc cfd --restart <a folder with no step file> (hunt 65)",
             lambda fx, tmp: [*_CFD, "--restart", "--out", str(tmp / "fresh")],
             message="holds no step_<n>.npz to continue from",
             note="started from step 0 without a word"),
        Case("hunt65", "hpc md --structure with --element --a --cells (hunt 65)",
             lambda fx, tmp: _md(fx, tmp, "--element", "Ni", "--a", "9.9", "--cells", "9", "9",
                                 "9"),
             message="--element, --a and --cells build a --lattice crystal",
             note="the three were dropped"),
        Case("hunt65", "hpc md --thermostat langevin without a target (hunt 65)",
             lambda fx, tmp: _md(fx, tmp, "--thermostat", "langevin"),
             message="--thermostat langevin needs --temperature-K", note="a bath at 0 K"),
        Case("hunt65", "hpc md --damp-fs with --thermostat none (hunt 65)",
             lambda fx, tmp: _md(fx, tmp, "--thermostat", "none", "--damp-fs", "5"),
             message="--damp-fs applies to --thermostat langevin or nose-hoover",
             note="no effect"),
        Case("hunt65", "hpc tlrmvm compress --matrix with --n --freq-hz (hunt 65)",
             lambda fx, tmp: ["hpc", "tlrmvm", "compress", "--matrix", _npy(tmp), "--n", "4096",
                              "--freq-hz", "999", "--nb", "16", "--out", str(tmp / "o.npz")],
             message="--n and --freq-hz shape the synthetic-seismic operator",
             note="both dropped, exit 0"),
        Case("hunt65", "infer generate --stages with --speculative-config (hunt 65)",
             lambda fx, tmp: _generate(fx.model(), "--prompt-ids", "1,2,3", "--max-tokens", "2",
                                       "--stages", "9", "--speculative-config",
                                       json.dumps({"model": fx.model(),
                                                   "num_speculative_tokens": 2})),
             message="--stages applies to the pipelined engine; drop it with --speculative-config",
             note="ignored, even 9 stages of a 1-layer model"),
        Case("hunt65", "infer serve --model-dir mock with a draft model (hunt 65)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--no-warmup",
            "--speculative-config", '{"model": "/nonexistent/draft", "num_speculative_tokens": 2}'),
            message="--speculative-config's model applies to a real model",
            note="served, the draft folder never looked at"),
    ]  # fmt: skip
