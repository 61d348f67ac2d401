"""The cases of `bench_hostile.py`: issue 43's five classes of hostile input, one entry each,
with the files they need built in a shared fixtures folder (`Fixtures`).

A case is a `wse` command line (`args`, a function of the fixtures and the case's own empty
temporary folder, so that every output path points into that folder), the exit code it must
give (2: refused; 1: a fault mid-run) and, optionally, text its one line must hold. The
output-path cases are generated from every command's output options (`wse_cli.outputs`), as
apps/cli/tests/test_cli_hostile_sizes.py reads them; the file bombs are the ones the tests use
(`wse_cli.testing`: `alias_bomb_yaml`, `deep_model_dir`, `bomb_trace`)."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# a chat template that renders any chat but one holding BOMB_MESSAGE, which it loops over 1e10
# times: the server test-renders a sample chat at start (hunt 62) and must start; the request
# carrying BOMB_MESSAGE must then be refused within the template's budget
BOMB_MESSAGE = "bomb"
TEMPLATE_BOMB = (
    "{% for m in messages %}{% if m.content == '" + BOMB_MESSAGE + "' %}"
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
    "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}"
)


@dataclass
class Case:
    """One hostile command: its class, name, arguments, the exit code it must give."""

    cls: str
    name: str
    args: Callable[[Fixtures, Path], list[str]]
    rc: int = 2
    message: str = ""  # text the one line must hold ("" : any)
    env: dict[str, str] = field(default_factory=dict)
    skip: str = ""  # why it is not run ("" : it runs)
    timeout_s: float | None = None  # its own limit over --timeout-s, with the reason in `note`
    note: str = ""


class Fixtures:
    """Input files built once per bench run under `root`, each on first use."""

    def __init__(self, root: Path, wse: list[str], env: dict[str, str]):
        self.root, self.wse, self.env = root, wse, env
        self._made: dict[str, Any] = {}
        self._held: list[socket.socket] = []

    def _once(self, name: str, build: Callable[[Path], Any]) -> Any:
        if name not in self._made:
            self._made[name] = build(self.root / name)
        return self._made[name]

    def _wse(self, *args: str) -> None:
        subprocess.run([*self.wse, *args], env=self.env, check=True, capture_output=True)

    def laughs(self) -> str:
        from wse_cli.testing import alias_bomb_yaml

        return str(self._once("laughs.yaml", alias_bomb_yaml))

    def deep_model(self) -> str:
        from wse_cli.testing import deep_model_dir

        def build(p: Path) -> Path:
            p.mkdir()
            return deep_model_dir(p)

        return str(self._once("deep", build))

    def bomb_trace(self) -> str:
        from wse_cli.testing import bomb_trace

        return str(self._once("bomb.npz", bomb_trace))

    def nan_params(self) -> str:
        def build(p: Path) -> Path:
            p.write_text("optimizer:\n  learning_rate: .nan\n")
            return p

        return str(self._once("nan.yaml", build))

    def trace(self) -> str:
        def build(p: Path) -> Path:
            self._wse("hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset",
                      "tiny", "--steps", "1", "--trace", str(p))  # fmt: skip
            return p

        return str(self._once("stencil.npz", build))

    def potential(self) -> str:
        def build(p: Path) -> Path:
            self._wse("hpc", "md", "potential", "--elements", "Cu", "--out", str(p))
            return p

        return str(self._once("Cu.eam.alloy", build))

    def operator(self) -> str:
        def build(p: Path) -> Path:
            self._wse("hpc", "tlrmvm", "compress", "--n", "256", "--nb", "64", "--out", str(p))
            return p

        return str(self._once("op.npz", build))

    def nan_operator(self) -> str:
        import numpy as np

        def build(p: Path) -> Path:
            with np.load(self.operator()) as f:
                data = {k: f[k] for k in f.files}
            data["u"] = data["u"].copy()
            data["u"].flat[0] = np.nan
            np.savez(p, **data)
            return p

        return str(self._once("nan_op.npz", build))

    def model(self) -> str:
        def build(p: Path) -> Path:
            from wse_inference.testing import save_tiny_model

            save_tiny_model(p, n_layers=1)
            return p

        return str(self._once("model", build))

    def _variant(self, name: str, change: Callable[[Path], None]) -> str:
        import shutil

        def build(p: Path) -> Path:
            shutil.copytree(self.model(), p)
            change(p)
            return p

        return str(self._once(name, build))

    def nan_model(self) -> str:
        def change(p: Path) -> None:
            from safetensors.numpy import load_file, save_file

            (st,) = p.glob("*.safetensors")
            tensors = load_file(st)
            for v in tensors.values():
                v[...] = float("nan")
            save_file(tensors, st)

        return self._variant("nan_model", change)

    def garbage_tokenizer(self) -> str:
        return self._variant(
            "garbage_tok", lambda p: (p / "tokenizer.json").write_text('{"model": {"vocab": {1: 2')
        )

    def chat_model(self) -> str:
        """The tiny model with a tokenizer.json (a byte-level BPE of its 256 ids, as
        test_infer_chat_template builds one): the HF tokenizer reads chat_template.jinja."""

        def change(p: Path) -> None:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            alphabet = pre_tokenizers.ByteLevel.alphabet()
            trainer = trainers.BpeTrainer(vocab_size=256, initial_alphabet=alphabet)
            tok.train_from_iterator(["hello wafer"], trainer)
            tok.save(str(p / "tokenizer.json"))

        return self._variant("chat_model", change)

    def port_in_use(self) -> str:
        s = socket.create_server(("127.0.0.1", 0))
        self._held.append(s)  # held until the bench ends
        return str(s.getsockname()[1])

    def close(self) -> None:
        for s in self._held:
            s.close()


# --- output options: every command's, with what else it needs to run --------------------
_POT, _OP, _TRACE = "{potential}", "{operator}", "{trace}"
_MD = [
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
    "--steps",
    "2",
    "--potential",
    _POT,
]  # fmt: skip (4 cells: the box exceeds 2 cutoffs)
_STENCIL = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny"]
BASE_ARGS = {
    "train": ["train", "tiny", "--validate-only"],
    "demo": ["demo"],
    "view": ["view", _TRACE],
    "wafer defects": ["wafer", "defects", "--preset", "wse1"],
    "hpc stencil": _STENCIL,
    "hpc cfd": ["hpc", "cfd", "--preset", "small"],
    "hpc md": _MD,
    "hpc md potential": ["hpc", "md", "potential", "--elements", "Cu"],
    "hpc tlrmvm compress": ["hpc", "tlrmvm", "compress", "--n", "256", "--nb", "64"],
    "hpc tlrmvm run": ["hpc", "tlrmvm", "run", "--operator", _OP],
    "infer generate": ["infer", "generate", "--model-dir", "mock", "--prompt", "x"],
    "infer bench": ["infer", "bench", "--url", "http://127.0.0.1:9"],
    "plan train": ["plan", "train", "--model", "llama3-8b", "--tokens", "1e12"],
    "plan infer": ["plan", "infer", "--model", "llama3-8b"],
    "experiments run": ["experiments", "run", "wafer-yield", "--quick"],
}


def _fill(fx: Fixtures, args: list[str]) -> list[str]:
    subs = {_POT: fx.potential, _OP: fx.operator, _TRACE: fx.trace}
    return [subs[a]() if a in subs else a for a in args]


def output_cases() -> list[Case]:
    """Every output option given a folder (a file for a folder option) and a path under a
    file: each must be refused at parsing, naming the option, and nothing made."""
    import typer
    from wse_cli.app import app
    from wse_cli.option_names import OUTPUT_MARK
    from wse_cli.testing import walk_commands

    out = []
    for path, cmd in walk_commands(typer.main.get_command(app)):
        for p in cmd.params:
            kind = getattr(p.callback, OUTPUT_MARK, None)
            if kind is None:
                continue
            base, opt = BASE_ARGS[" ".join(path)], p.opts[0]
            for how in ("folder", "under a file"):

                def args(fx, tmp, base=base, opt=opt, how=how, kind=kind):
                    (tmp / "a_file").write_text("x")
                    if how == "under a file":
                        value = tmp / "a_file" / "sub" / "out.png"
                    else:
                        value = tmp / "a_file" if kind == "dir" else tmp
                    return [*_fill(fx, base), opt, str(value)]

                name = f"{' '.join(path)} {opt} {how}"
                out.append(Case("output", name, args, message=f"Error: {opt} "))
    return out


def _const(*args: str) -> Callable[[Fixtures, Path], list[str]]:
    return lambda fx, tmp: list(args)


def cases() -> list[Case]:
    """Issue 43's hostile set, class by class."""
    run = lambda tmp: str(tmp / "a" / "b" / "run")  # noqa: E731  a model dir two levels deep
    launch = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--"]
    sizes = [
        Case("size", "serve --max-num-seqs 1e9", _const(
            "infer", "serve", "--model-dir", "mock", "--max-num-seqs", "1000000000"),
            message="WSE_LIMIT_SERVE_SLOTS"),
        Case("size", "wafer info --spec /dev/zero", _const("wafer", "info", "--spec", "/dev/zero")),
        Case("size", "--devices 100000 hpc stencil", _const(
            "--devices", "100000", "hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4"),
            message="WSE_LIMIT_DEVICES"),
        Case("size", "launch --devices-per-proc 1e6", _const(
            "launch", "--nproc", "2", "--devices-per-proc", "1000000", "--", "wafer", "info"),
            message="WSE_LIMIT_DEVICES"),
        Case("size", "launch --nproc 1e6", _const("launch", "--nproc", "1000000", "--", "wafer",
             "info"), message="WSE_LIMIT_PROCESSES"),
        Case("size", "plan infer --gpus 1e18", _const(
            "plan", "infer", "--model", "llama3-8b", "--gpus", "1e18"), message="WSE_LIMIT_GPUS"),
        Case("size", "plan infer --gpus 1e9", _const(
            "plan", "infer", "--model", "llama3-8b", "--gpus", "1000000000")),
        Case("size", "view 100000x100000 header", lambda fx, tmp: [
            "view", fx.bomb_trace(), "--out", str(tmp / "v.html")]),
        Case("size", "train billion-laughs --validate-only", lambda fx, tmp: [
            "train", fx.laughs(), "--validate-only"], message="WSE_LIMIT_YAML_NODES"),
        Case("size", "train billion-laughs (a run)", lambda fx, tmp: [
            "train", fx.laughs(), "--model-dir", run(tmp)], message="WSE_LIMIT_YAML_NODES"),
        Case("size", "infer generate config.json 1e5 deep", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.deep_model(), "--prompt", "x"],
            message="WSE_LIMIT_JSON_DEPTH"),
        Case("size", "plan infer config.json 1e5 deep", lambda fx, tmp: [
            "plan", "infer", "--model", fx.deep_model() + "/config.json"],
            message="WSE_LIMIT_JSON_DEPTH"),
        Case("size", "infer serve config.json 1e5 deep", lambda fx, tmp: [
            "infer", "serve", "--model-dir", fx.deep_model()], message="WSE_LIMIT_JSON_DEPTH"),
    ]  # fmt: skip
    outputs = [
        *output_cases(),
        Case("output", "wafer defects --png /tmp", _const(
            "wafer", "defects", "--preset", "wse1", "--png", "/tmp"), message="is a folder"),
    ]  # fmt: skip
    non_finite = [
        Case("non-finite", "train optimizer.learning_rate=nan", lambda fx, tmp: [
            "train", "tiny", "optimizer.learning_rate=nan", "--model-dir", run(tmp)],
            message="finite"),
        Case("non-finite", "train optimizer.learning_rate=1e400", lambda fx, tmp: [
            "train", "tiny", "optimizer.learning_rate=1e400", "--model-dir", run(tmp)],
            message="finite"),
        Case("non-finite", "train params.yaml learning_rate .nan", lambda fx, tmp: [
            "train", fx.nan_params(), "--model-dir", run(tmp)], message="finite"),
        Case("non-finite", "plan train --mfu 1e-300", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--mfu", "1e-300")),
        Case("non-finite", "plan infer --mfu 1e-300", _const(
            "plan", "infer", "--model", "llama3-8b", "--mfu", "1e-300")),
        Case("non-finite", "--assume hop_latency_cycles=nan", _const(
            "experiments", "run", "wafer-yield", "--assume", "hop_latency_cycles=nan"),
            message="finite"),
        Case("non-finite", "wafer info --set clock_hz=inf", _const(
            "wafer", "info", "--set", "clock_hz=inf"), message="finite"),
        Case("non-finite", "hpc md --dt-fs 1000000", lambda fx, tmp: [
            *_fill(fx, _MD), "--dt-fs", "1000000"],  # _MD gives --steps (twice is refused)
            message="WSE_LIMIT_MD_DT_FS", note="past the md_dt_fs limit: refused at parsing"),
        Case("non-finite", "tlrmvm run NaN bases", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", fx.nan_operator()]),
        Case("non-finite", "infer generate NaN weights", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.nan_model(), "--prompt", "x"]),
        Case("non-finite", "infer generate NaN draft weights", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt", "x",
            "--speculative-config", json.dumps({"model": fx.nan_model()})]),
        Case("non-finite", "infer serve NaN weights", lambda fx, tmp: [
            "infer", "serve", "--model-dir", fx.nan_model(), "--port", "0"]),
        Case("non-finite", "infer serve NaN draft weights", lambda fx, tmp: [
            "infer", "serve", "--model-dir", fx.model(), "--port", "0",
            "--speculative-config", json.dumps({"model": fx.nan_model()})]),
        Case("non-finite", "train lr=1e30 diverges", _const(), rc=1,
             skip="a real training run (> 30 s here): test_trainer_resume's NaN-loss tests"),
    ]  # fmt: skip
    faults = [
        Case("fault", "infer generate garbage tokenizer.json", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.garbage_tokenizer(), "--prompt", "x"]),
        Case("fault", "train missing data_dir", lambda fx, tmp: [
            "train", "tiny", "train_input.data_dir=/nonexistent/corpus", "--model-dir", run(tmp)]),
        Case("fault", "train missing --checkpoint-path", lambda fx, tmp: [
            "train", "tiny", "--checkpoint-path", "/nonexistent/ckpt", "--model-dir", run(tmp)]),
        Case("fault", "full disk during a checkpoint save", _const(), rc=1,
             skip="a real training run (> 30 s here): test_train_disk_full_cli (slow)"),
    ]  # fmt: skip
    front = [
        Case("front end", "serve --port P --grpc-port P", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "8123", "--grpc-port", "8123"),
            message="both 8123"),
        Case("front end", "serve --grpc-port <in use>", lambda fx, tmp: [
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--grpc-port",
            fx.port_in_use()], message="cannot be bound"),
        Case("front end", "serve --port <in use>", lambda fx, tmp: [
            "infer", "serve", "--model-dir", "mock", "--port", fx.port_in_use()],
            message="cannot be bound"),
        Case("front end", "launch --nproc 2 -- infer serve", _const(
            *launch, "infer", "serve", "--model-dir", "mock"), message="same --port"),
        Case("front end", "launch --port <in use>", lambda fx, tmp: [
            "launch", "--nproc", "1", "--port", fx.port_in_use(), "--", "wafer", "info"]),
        Case("front end", "launch 2 -- --num-processes 3", _const(
            *launch, "--num-processes", "3", "wafer", "info")),
        Case("front end", "launch 2 -- hpc stencil --png <folder>", lambda fx, tmp: [
            *launch, *_STENCIL, "--png", str(tmp)], message="is a folder"),
        Case("front end", "launch 2 -- a child's error once", _const(
            *launch, "wafer", "info", "--preset", "nope"),
            note="each child refuses in its body before JAX: the join waits for JAX's import"),
        Case("front end", "launch --nproc 2 on a one-GPU host", _const(), skip="needs a GPU host"),
    ]  # fmt: skip
    from hostile_cases_hunts import hunt_cases  # issue 54's and each session's since

    return [*sizes, *outputs, *non_finite, *faults, *front, *hunt_cases()]
