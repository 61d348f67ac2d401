"""Hunt 57's hostile cases (each fixed; the tests are apps/cli/tests/test_cli_hostile_limits.py,
test_cli_hostile_train.py and packages/inference/tests/test_serve_hostile_fields.py): limits
with a name that were missing (an --assume value past its constant's range, a zip bomb, XYZ
files past the limits xyz_bytes / xyz_atoms) and `wse train`'s data files and run folders; and
hunt 59's (`hunt59_cases`, tested in apps/cli/tests/test_cli_hostile_hunt59.py). Built as
`hostile_cases.Case`s, each writing the files it needs into its own temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

from hostile_cases import Case, _const, _fill


def _bomb(tmp: Path) -> str:
    from wse_cli.testing import zip_bomb_npz

    return str(zip_bomb_npz(tmp / "bomb.npz"))


def _sparse_xyz(tmp: Path, size: int) -> str:
    with open(tmp / "huge.xyz", "w") as f:  # a hole: no disk used
        f.write("4\n")
        f.truncate(size)
    return str(tmp / "huge.xyz")


def _many(tmp: Path, n: int) -> str:
    import io
    import zipfile

    import numpy as np

    one = io.BytesIO()
    np.save(one, np.zeros(1))
    with zipfile.ZipFile(tmp / "many.npz", "w") as z:
        for i in range(n):
            z.writestr(f"a{i}.npy", one.getvalue())
    return str(tmp / "many.npz")


def _text(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


_TRAIN = ["train", "tiny", "runconfig.max_steps=2", "runconfig.mode=train", "model.vocab_size=300",
          "train_input.batch_size=2", "runconfig.sample_tokens=0"]  # fmt: skip


_UNSTEPPED = [a for a in _TRAIN if not a.startswith("runconfig.max_steps=")]  # for --max-steps


def _data(tmp: Path, name: str, raw: bytes) -> list[str]:
    (tmp / name).write_bytes(raw)
    return [*_TRAIN, f"train_input.data_dir={tmp / name}", "-o", str(tmp / "run")]


def _fake_step(tmp: Path, **model) -> Path:
    """A step folder whose meta is the tiny config's model with `model`'s fields changed."""
    import dataclasses
    import json

    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    own = json.loads(json.dumps(dataclasses.asdict(model_config(load_config("tiny", _TRAIN[2:])))))
    folder = tmp / "run" / "checkpoints" / "2" / "meta"
    folder.mkdir(parents=True)
    (folder / "metadata").write_text(json.dumps({"step": 2, "model": {**own, **model}}))
    return folder.parent


def _empties(tmp: Path, n: int) -> str:
    (tmp / "docs").mkdir()
    for i in range(n):
        (tmp / "docs" / f"{i}.txt").touch()
    return str(tmp / "docs")


def _folder_of(tmp: Path, name: str) -> str:
    (tmp / "mine").mkdir()
    (tmp / "mine" / name).write_text("precious\n")
    return str(tmp / "mine")


def more_cases() -> list[Case]:
    pot = lambda fx: _fill(fx, ["{potential}"])[0]  # noqa: E731
    return [
        Case("more", "experiments run --assume fp32_mul_width=1e30", _const(
            "experiments", "run", "wafer-yield", "--quick", "--assume", "fp32_mul_width=1e30"),
            message="fp32_mul_width must be in [0.125, 64] elements/cycle"),
        Case("more", "experiments run --assume clock_hz=1e30", _const(
            "experiments", "run", "wafer-yield", "--quick", "--assume", "clock_hz=1e30"),
            message="clock_hz must be in [1e+06, 1e+11] Hz"),
        Case("more", "wafer info --set fp32_mul_width=1e30", _const(
            "wafer", "info", "--set", "fp32_mul_width=1e30"),
            message="fp32_mul_width must be in [0.125, 64] elements/cycle"),
        Case("more", "tlrmvm run --operator <zip bomb>", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _bomb(tmp)], message="a zip bomb?"),
        Case("more", "view <zip bomb>", lambda fx, tmp: [
            "view", _bomb(tmp), "--out", str(tmp / "v.html")], message="a zip bomb?"),
        Case("more", "hpc md --structure <9 GiB sparse file>", lambda fx, tmp: [
            "hpc", "md", "--structure", _sparse_xyz(tmp, 9 << 30), "--potential", pot(fx)],
            message="WSE_LIMIT_XYZ_BYTES"),
        Case("more", "hpc md --structure with 2e8 atoms announced", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "in.xyz", '200000000\nLattice="3.6 0 0 0 '
            '3.6 0 0 0 3.6"\nCu 0 0 0\n'), "--potential", pot(fx)], message="WSE_LIMIT_XYZ_ATOMS"),
        Case("more", "hpc md --potential <9 GiB sparse file>", lambda fx, tmp: [
            "hpc", "md", "--structure", _text(tmp, "one.xyz", '1\nLattice="3.6 0 0 0 3.6 0 0 0 '
            '3.6"\nCu 0 0 0\n'), "--potential", _sparse_xyz(tmp, 9 << 30)],
            message="WSE_LIMIT_FILE_BYTES"),
        Case("more", "tlrmvm run --operator <.npz of 200,000 members>", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _many(tmp, 200_000)],
            message="WSE_LIMIT_NPZ_MEMBERS"),
        Case("more", "train data: empty .txt", lambda fx, tmp: _data(tmp, "e.txt", b""),
             message="is empty (0 bytes)"),
        Case("more", "train data: binary .txt", lambda fx, tmp: _data(
            tmp, "b.txt", b"ab\0" * 1000), message="is binary (a NUL byte at offset 2)"),
        Case("more", "train data: Latin-1 .txt", lambda fx, tmp: _data(
            tmp, "l.txt", "café ".encode("latin-1") * 200), message="is not UTF-8 text"),
        Case("more", "train data: smaller than one batch", lambda fx, tmp: _data(
            tmp, "s.txt", b"hello world\n"), message="fewer than one batch"),
        Case("more", "train data: a .parquet that is not one", lambda fx, tmp: _data(
            tmp, "x.parquet", b"nope" * 100), message="is not a Parquet file"),
        Case("more", "train data: .jsonl with a number as text", lambda fx, tmp: _data(
            tmp, "n.jsonl", b"".join(b'{"text": %d}\n' % i for i in range(1, 300))),
            message="'text' is 1, not a string; every 'text' must be text"),
        Case("more", "train train_input.max_corpus_bytes=0", lambda fx, tmp: [
            *_TRAIN, "train_input.max_corpus_bytes=0", "-o", str(tmp / "run")],
            message="max_corpus_bytes must be positive"),
        Case("more", "train data_dir of 100,001 .txt files", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={_empties(tmp, 100_001)}", "-o", str(tmp / "run")],
            message="holds more than 100,000 data files"),
        Case("more", "train -o <folder of other files>", lambda fx, tmp: [
            *_TRAIN, "-o", _folder_of(tmp, "thesis.tex")], message="is no run folder"),
        Case("more", "train -o <run of another model size>", lambda fx, tmp: [
            *_TRAIN, "-o", str(_fake_step(tmp, d_model=64).parent.parent)],
            message="is of another model (d_model 64 there, 128 here)"),
        Case("more", "train --checkpoint-path <another model>", lambda fx, tmp: [
            *_TRAIN, "-o", str(tmp / "new"), "--checkpoint-path", str(_fake_step(
                tmp, n_layers=2))], message="drop --checkpoint-path"),
    ]  # fmt: skip


def hunt59_cases() -> list[Case]:
    """Hunt 59's: an argument echoed whole, a path too long for the file system, --stop past
    the server's bounds, a vocabulary under the tokenizer's, --num-steps past --max-steps, an
    option given twice, WSE_DEVICES set empty, HPC steps past time_steps, data_dir=/."""
    gen = ["infer", "generate", "--model-dir", "no-model", "--prompt", "hi"]
    return [
        Case("more", "infer generate --prompt-ids <6,000 characters> (hunt 59)", _const(
            "infer", "generate", "--model-dir", "m", "--prompt-ids", "1," + "Q" * 6000),
            message="... (6,002 characters)"),
        Case("more", "view <a 300-character file name> (hunt 59)", _const("view", "Q" * 300),
             message="is too long for this file system"),
        Case("more", "infer generate --stop x5 (hunt 59)", _const(  # hunt 79: 64 taken, as vLLM
            *gen, *[a for i in range(65) for a in ("--stop", f"s{i}")]),
             message="--stop is given 65 times"),
        Case("more", "infer generate --stop <2,000 characters> (hunt 59)", _const(
            *gen, "--stop", "s" * 2000), message="a stop string has at most 1,024 characters"),
        Case("more", "train model.vocab_size=1 (hunt 59)", lambda fx, tmp: [
            *[a for a in _TRAIN if "vocab_size" not in a], "model.vocab_size=1", "-o",
            str(tmp / "run")],
            message="set model.vocab_size to at least 257"),
        Case("more", "train --max-steps 5 --num-steps 10 (hunt 59)", lambda fx, tmp: [
            *_UNSTEPPED, "--max-steps", "5", "--num-steps", "10", "-o", str(tmp / "run")],
            message="runconfig.num_steps=10 (--num-steps"),
        Case("more", "--devices 8 --devices 9 (hunt 59)", _const(
            "--devices", "8", "--devices", "9", "wafer", "info"),
            message="--devices is given twice ('8', then '9')"),
        Case("more", "WSE_DEVICES='' (hunt 59)", _const("wafer", "info"),
             env={"WSE_DEVICES": ""}, message="WSE_DEVICES is set but empty"),
        Case("more", "hpc swe --steps 2147483647 (hunt 59)", _const(
            "hpc", "swe", "--steps", "2147483647"), message="WSE_LIMIT_TIME_STEPS"),
        Case("more", "train train_input.data_dir=/ (hunt 59)", lambda fx, tmp: [
            *_TRAIN, "train_input.data_dir=/", "-o", str(tmp / "run")],
            message="is inside train_input.data_dir '/'",
            note="walks / to 10,000 folders (data_folders, hunt 60; was 48,000 folders to "
            "100,000 data files: ~1 s warm, 3-5 s with a cold dentry cache)"),
    ]  # fmt: skip


def hunt60_cases() -> list[Case]:
    """Hunt 60's: one config key given two values (two overrides, an override and its flag),
    a blank WSE_DEVICES echoed as given, a data_dir of more folders than `data_folders`."""
    check = ["train", "tiny", "--validate-only"]
    return [
        Case("more", "train model.vocab_size=300 model.vocab_size=1 (hunt 60)", _const(
            *check, "model.vocab_size=300", "model.vocab_size=1"),
            message="model.vocab_size is given twice ('300', then '1')"),
        Case("more", "train runconfig.max_steps=2 --max-steps 5 (hunt 60)", lambda fx, tmp: [
            *_TRAIN, "--max-steps", "5", "-o", str(tmp / "run")],
            message="runconfig.max_steps is given twice ('2', then --max-steps '5')"),
        Case("more", "WSE_DEVICES=' ' (hunt 60)", _const("wafer", "info"),
             env={"WSE_DEVICES": " "}, message="got ' '"),
        Case("more", "train data_dir of 10,001 folders (hunt 60)", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={_folders(tmp, 10_001)}", "-o", str(tmp / "run")],
            message="holds more than 10,000 folders"),
        Case("more", "train data_dir holding a FIFO .txt (hunt 60)", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={_with(tmp, os.mkfifo)}", "-o", str(tmp / "run")],
            message="is a FIFO, not a regular file", note="the check's read hung on the FIFO"),
        Case("more", "train data_dir holding a link loop .txt (hunt 60)", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={_with(tmp, lambda p: p.symlink_to(p))}", "-o",
            str(tmp / "run")], message="Too many levels of symbolic links"),
        Case("more", "train data_dir=<a link loop> (hunt 60)", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={_loop(tmp / 'corpus')}", "-o", str(tmp / "run")],
            message="cannot be read", note="was looked up on the Hub as a dataset name"),
        Case("more", "hpc md potential --out <a link loop> (hunt 60)", lambda fx, tmp: [
            "hpc", "md", "potential", "--elements", "Cu", "--out", _loop(tmp / "pot")],
            message="is a symbolic link that cannot be followed"),
        Case("more", "wafer defects --png <under a link loop> (hunt 60)", lambda fx, tmp: [
            "wafer", "defects", "--preset", "wse1", "--png", _loop(tmp / "d") + "/w.png"],
            message="is not a writable folder"),
        Case("more", "view <a link loop> (hunt 60)", lambda fx, tmp: [
            "view", _loop(tmp / "t.npz")], message="no trace file"),
        Case("more", "view <a name with a newline and ESC> (hunt 60)", _const(
            "view", "a\nb\x1b[2J.npz"), message="no trace file a\\nb\\x1b[2J.npz"),
        Case("more", "infer generate --prompt $'\\xff' (hunt 60)", lambda fx, tmp: [
            "infer", "generate", "--model-dir", fx.model(), "--prompt", "ab\udcff"],
            message="is not UTF-8 text (byte 0xff", note="was a traceback after the model loaded"),
        Case("more", "train runconfig.sample_prompt=$'\\xff' (hunt 60)", lambda fx, tmp: [
            *[a for a in _TRAIN if "sample_tokens" not in a], "runconfig.sample_tokens=4",
            "runconfig.sample_prompt=\udcff", "-o", str(tmp / "run")],
            message="is not UTF-8 text", note="was a traceback after the whole run"),
        Case("more", "hpc cfd --restart <step -5> (hunt 60)", lambda fx, tmp: [
            *_CFD, _step(tmp, step=-5)], message="step must be one integer >= 0"),
        Case("more", "hpc cfd --restart <time inf> (hunt 60)", lambda fx, tmp: [
            *_CFD, _step(tmp, time=float("inf"))], message="time must be one finite number"),
        Case("more", "hpc cfd --restart <a FIFO step file> (hunt 60)", lambda fx, tmp: [
            *_CFD, _fifo(tmp, "step_0000010.npz")], message="not a regular file",
            note="np.load's open waited for a writer forever"),
        Case("more", "hpc tlrmvm run --operator <FIFO> (hunt 60)", lambda fx, tmp: [
            "hpc", "tlrmvm", "run", "--operator", _fifo(tmp, "op.npz") + "/op.npz"],
            message="not a regular file", note="np.load's open waited for a writer forever"),
        Case("more", "train model.tie_embeddings=\"false\" (hunt 60)", lambda fx, tmp: [
            *_TRAIN, 'model.tie_embeddings="false"', "-o", str(tmp / "run")],
            message="must be true or false", note="the text 'false' tied the embeddings"),
        Case("more", "train model.rope_scaling=5 (hunt 60)", lambda fx, tmp: [
            *_TRAIN, "model.preset=tiny-llama", "model.rope_scaling=5", "-o", str(tmp / "run")],
            message="rope_scaling must be null or a mapping",
            note="an AttributeError after the run folder and tokenizer were made"),
        Case("more", "infer generate <model dir with a FIFO .safetensors> (hunt 60)",
             lambda fx, tmp: ["infer", "generate", "--model-dir", _fifo_weights(fx, tmp),
                              "--prompt-ids", "1,2"], message="is a FIFO, not a regular file",
             note="safe_open waited for a writer forever"),
        Case("more", "infer generate <model dir with a FIFO config.json> (hunt 60)",
             lambda fx, tmp: ["infer", "generate", "--model-dir", _fifo_weights(fx, tmp,
                              "config.json"), "--prompt-ids", "1,2"],
             message="config.json' is a FIFO, not a regular file",
             note="was said to be missing ('has safetensors but no config.json')"),
        Case("more", "infer serve --served-model-name <100,000 characters> (hunt 60)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--served-model-name",
            "x" * 100_000), message="is longer than 256 characters", note="was served"),
    ]  # fmt: skip


def _fifo_weights(fx, tmp: Path, name: str = "*.safetensors") -> str:
    """A copy of the tiny model dir whose .safetensors (or `name`) is a FIFO."""
    import shutil

    shutil.copytree(fx.model(), tmp / "m")
    (st,) = (tmp / "m").glob(name)
    st.unlink()
    os.mkfifo(st)
    return str(tmp / "m")


_CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "1", "--restart", "--out"]


def _step(tmp: Path, **change) -> str:
    """A folder holding a CFD step file of the 8 x 8 x 1 grid with `change`'s arrays."""
    import numpy as np

    fields = {k: np.zeros((8, 8, 1), np.float32) for k in "uvwpT"}
    np.savez(tmp / "step_0000010.npz", **{**fields, "step": 10, "time": 0.5, **change})
    return str(tmp)


def _fifo(tmp: Path, name: str) -> str:
    os.mkfifo(tmp / name)
    return str(tmp)


def _loop(path: Path) -> str:
    path.symlink_to(path)
    return str(path)


def _with(tmp: Path, make) -> str:
    """A corpus folder of one document and `make(folder / "f.txt")` beside it."""
    (tmp / "docs").mkdir()
    (tmp / "docs" / "a.txt").write_text("the wafer streams weights " * 100)
    make(tmp / "docs" / "f.txt")
    return str(tmp / "docs")


def _folders(tmp: Path, n: int) -> str:
    for i in range(n):
        (tmp / "docs" / str(i)).mkdir(parents=True)
    return str(tmp / "docs")
