"""The CLI refusals of session 65 (hunt 64, each fixed), as `hostile_cases.Case`s whose commands
and messages are those of their tests: apps/cli/tests/test_cli_hostile_hunt64_model_dirs.py
(model folders), test_cli_view_hunt64.py, test_cli_wafer_hunt64.py (and wse_core's
test_core_hunt64.py for spec files), test_cli_experiments_hunt64.py, test_cli_md_hunt64.py and
test_cli_hostile_hunt63_plan.py's draft context. One case per distinct refusal, each writing
the files it needs into its own temporary folder. Select them with `--only '(hunt 64)'`."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from hostile_cases import Case, Fixtures, _const
from hostile_cases_hunt62 import _copy, _generate, _spec
from hostile_cases_more import _TRAIN
from wse_models.testing import LLAMA3_8B_HF

_GEN = ["--prompt-ids", "1,2,3", "--max-tokens", "4", "--temperature", "0"]


def _variant(fx: Fixtures, tmp: Path, edit) -> str:  # noqa: ANN001
    """The fixtures' tiny model copied to `tmp/v`, then `edit(folder, tensors)`."""
    from safetensors.numpy import load_file

    folder = _copy(fx, tmp / "v", bpe=True)
    edit(folder, load_file(str(folder / "model.safetensors")))
    return str(folder)


def _raw(folder: Path, header: dict, blob: bytes) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + blob)


def _fp8(folder: Path, tensors) -> None:  # noqa: ANN001
    header, blob = {}, b""
    for name, x in tensors.items():
        data = bytes(x.size)
        header[name] = {"dtype": "F8_E4M3", "shape": list(x.shape),
                        "data_offsets": [len(blob), len(blob) + len(data)]}  # fmt: skip
        blob += data
    _raw(folder, header, blob)


def _million(folder: Path, tensors) -> None:  # noqa: ANN001
    header, blob = {}, b""
    for name, x in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(x.shape),
                        "data_offsets": [len(blob), len(blob) + x.nbytes]}  # fmt: skip
        blob += x.tobytes()
    empty = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    header |= {f"x{i}": empty for i in range(1_000_000)}
    _raw(folder, header, blob)


def _second_file(folder: Path, tensors) -> None:  # noqa: ANN001
    import numpy as np
    from safetensors.numpy import save_file

    save_file({k: np.zeros_like(v) for k, v in tensors.items()}, str(folder / "model2.safetensors"))


def _bool(folder: Path, tensors) -> None:  # noqa: ANN001
    from safetensors.numpy import save_file

    save_file({k: v > 0 for k, v in tensors.items()}, str(folder / "model.safetensors"))


def _index_list(folder: Path, tensors) -> None:  # noqa: ANN001
    (folder / "model.safetensors.index.json").write_text('{"weight_map": ["a"]}')


def _trace(fx: Fixtures, tmp: Path, change=None) -> str:  # noqa: ANN001
    """The fixtures' trace copied to `tmp/t.npz`, its header or arrays changed by `change`."""
    import numpy as np

    with np.load(fx.trace()) as z:
        arrays = {k: z[k] for k in z.files}
    head = json.loads(bytes(arrays.pop("header")))
    if change is not None:
        change(head, arrays)
    out = tmp / "t.npz"
    np.savez_compressed(out, header=np.frombuffer(json.dumps(head).encode(), np.uint8), **arrays)
    return str(out)


def _fifo_page(fx: Fixtures, tmp: Path) -> list[str]:
    trace = _trace(fx, tmp)
    os.mkfifo(tmp / "t.html")
    return ["view", trace]


def _draft(tmp: Path) -> str:
    (tmp / "draft").mkdir()
    config = {**LLAMA3_8B_HF, "num_hidden_layers": 1, "max_position_embeddings": 1279}
    (tmp / "draft" / "config.json").write_text(json.dumps(config))
    return str(tmp / "draft")


def _out_holding(tmp: Path, entry: str, fifo: bool) -> str:
    folder = tmp / "d2" / "wafer-yield"
    folder.mkdir(parents=True)
    (os.mkfifo if fifo else os.mkdir)(folder / entry)
    return str(tmp / "d2")


def _nan_tilt(fx: Fixtures, tmp: Path) -> str:
    from wse_hpc.md import crystal, write_xyz

    path = write_xyz(tmp / "c.xyz", [crystal("fcc", "Cu", 3.615, (4, 4, 4))])
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('Lattice="14.46 0 0', 'Lattice="14.46 nan nan')
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _renamed_setfl(fx: Fixtures, tmp: Path) -> str:
    pot = tmp / "Cu_zhou04.alloy"
    pot.write_bytes(Path(fx.potential()).read_bytes())
    return str(pot)


_LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]


def _matrix(tmp: Path, array) -> str:  # noqa: ANN001
    import numpy as np

    np.save(tmp / "m.npy", array)
    return str(tmp / "m.npy")


def _step_file(tmp: Path, name: str, step: int, u: float) -> str:
    """A Rayleigh-Benard step file of the 16 x 8 x 1 grid, u everywhere `u`."""
    import numpy as np

    shape = (16, 8, 1)
    fields = {k: np.zeros(shape, np.float32) for k in ("v", "w", "p", "T")}
    np.savez(tmp / name, step=step, time=0.5, lengths=np.array([2.0, 1.0, 1.0]),
             case=np.asarray("rayleigh-benard"), u=np.full(shape, u, np.float32),
             **fields)  # fmt: skip
    return str(tmp)


_RESTART = ["hpc", "cfd", "--grid", "16", "8", "1", "--steps", "10", "--preset", "small",
            "--restart"]  # fmt: skip


def _docs(tmp: Path, name: str, data: bytes) -> str:
    (tmp / "docs").mkdir()
    (tmp / "docs" / name).write_bytes(data)
    return str(tmp / "docs")


def _run_without_eos(tmp: Path) -> str:
    from wse_inference.testing import save_byte_bpe

    (tmp / "run").mkdir()
    save_byte_bpe(tmp / "run" / "tokenizer.json", vocab_size=260)
    return str(tmp / "run")


def hunt64_cases() -> list[Case]:
    """Session 65's refusals: each failed on the code before (the note says how)."""
    model = [
        Case("hunt64", f"infer generate <{what}> (hunt 64)",
             lambda fx, tmp, edit=edit: _generate(_variant(fx, tmp, edit), *_GEN),
             message=message, note=note)
        for what, edit, message, note in [
            ("index weight_map a list", _index_list, '"weight_map" must be an object of '
             "tensor name -> shard file name, got a list", "a 61-line traceback"),
            ("FP8 tensors", _fp8, "model.safetensors is F8_E4M3; this loader reads F16, BF16, "
             "F32 and F64", "a traceback: numpy has no float8_e4m3fn"),
            ("a second file of the same tensors", _second_file, "is in both model.safetensors "
             "and model2.safetensors; remove one", "the second file's zeros served, exit 0"),
            ("bool weights", _bool, "is bool; model weights must be floating point",
             "cast to float32 and served"),
            ("a header of 1,000,000 empty tensors", _million, "tensors; a checkpoint of 1 "
             "layer lists at most 32",
             "refused after 20.5 s at 1.2 GB"),
        ]
    ]  # fmt: skip
    view = [
        Case("hunt64", "view <FIFO at the default page> (hunt 64)", _fifo_page,
             message="is a FIFO, not a regular file; give a file name", note="hung for good"),
        Case("hunt64", "view <meta.clock_hz NaN> (hunt 64)", lambda fx, tmp: [
            "view", _trace(fx, tmp, lambda h, a: h["meta"].update(clock_hz=float("nan")))],
            message="meta.clock_hz is NaN; a trace holds finite numbers",
            note="exit 0, a page whose JSON the browser cannot parse (blank)"),
        Case("hunt64", "view <meta.bound of 2,000,000 characters> (hunt 64)", lambda fx, tmp: [
            "view", _trace(fx, tmp, lambda h, a: h["meta"].update(bound="x" * 2_000_000)),
            "--png", str(tmp / "v.png")],
            message="meta.bound must be a text of at most 1,000 characters",
            note="over 120 s at 930 MB in the PNG's title"),
        Case("hunt64", "view <layers of 400 x 400 cells> (hunt 64)", lambda fx, tmp: [
            "view", _trace(fx, tmp, lambda h, a: a.update(
                {k: __import__("numpy").ones((400, 400)) for k in a if k != "dead"}))],
            message="has 160,000 cells in layer", note="2,800^2: a 460 MB page at 3 GB"),
    ]  # fmt: skip
    wafer = [
        Case("hunt64", "wafer info --spec <pe_rows: 7:30> (hunt 64)", lambda fx, tmp: [
            "wafer", "info", "--spec", _spec(tmp, "base: wse3\npe_rows: 7:30\n")],
            message="must be a number, got the text '7:30': spec files read numbers as YAML 1.2",
            note="read as 450 (YAML 1.1's base 60)"),
        Case("hunt64", "wafer info --spec <simd_widths add.fp16: yes> (hunt 64)",
             lambda fx, tmp: ["wafer", "info", "--spec", _spec(
                 tmp, "base: wse3\nsimd_widths: {add.fp16: yes, mul.fp16: 8}\n")],
             message="simd_widths['add.fp16'] must be a positive number, got True",
             note="a width of 1"),
        Case("hunt64", "wafer defects --set name=<a newline> (hunt 64)", _const(
            "wafer", "defects", "-p", "tiny", "--set", "name=a\nb"),
            message="name holds '\\n' (U+000A), a control character", note="two lines printed"),
        Case("hunt64", "wafer check --grid 5000 5000 (hunt 64)", _const(
            "wafer", "check", "--grid", "5000", "5000"),
            message="is 25,000,000 PEs; the check's sums are exact up to 16,777,216 PEs",
            note="checked to 1e-4 of the grid's L1 norm: a wrong shift printed ok"),
    ]  # fmt: skip
    runs = [
        Case("hunt64", f"experiments run --out <{entry} {'a FIFO' if fifo else 'a folder'}> "
             "(hunt 64)", lambda fx, tmp, entry=entry, fifo=fifo: [
                 "experiments", "run", "wafer-yield", "--quick", "--out",
                 _out_holding(tmp, entry, fifo)],
             message=f"holds wafer-yield/{entry}, which is {'a FIFO' if fifo else 'a folder'}, "
                     "not a regular file", note=note)
        for entry, fifo, note in [("table.md", True, "hung after the run"),
                                  ("results.json", False, "a traceback after the run")]
    ] + [
        Case("hunt64", "plan infer --draft <a context of 1,279 tokens> (hunt 64)",
             lambda fx, tmp: ["plan", "infer", "-m", "llama3-8b", "--draft", _draft(tmp),
                              "--alpha", "0.7"],
             message="holds a context of 1,279 tokens, a request here 1,280: a draft reads "
                     "the whole request", note="planned"),
        Case("hunt64", "hpc md --steps 10000000 --thermo-every 1 --out (hunt 64)",
             lambda fx, tmp: ["hpc", "md", *_LATTICE, "--potential", fx.potential(),
                              "--preset", "small", "--steps", "10000000", "--thermo-every", "1",
                              "--out", str(tmp / "t.xyz")],
             message="over the limit of 8,589,934,592 bytes (an extended XYZ file read)",
             note="started writing ~386 GB"),
        Case("hunt64", "hpc md --structure <Lattice tilts nan> (hunt 64)", lambda fx, tmp: [
            "hpc", "md", "--structure", _nan_tilt(fx, tmp), "--potential", fx.potential(),
            "--steps", "0"], message="only orthorhombic lattices are supported",
            note="ran as orthorhombic"),
        Case("hunt64", "hpc md --potential <a setfl named *.alloy> (hunt 64)", lambda fx, tmp: [
            "hpc", "md", *_LATTICE, "--potential", _renamed_setfl(fx, tmp), "--steps", "0"],
            message="the file was read as funcfl (LAMMPS pair_style eam) by its name",
            note="\"'X.' is not an integer\" alone"),
    ]  # fmt: skip
    hpc = [
        Case(
            "hunt64",
            "tlrmvm compress --matrix <entries of 1e-44> (hunt 64)",
            lambda fx, tmp: [
                "hpc",
                "tlrmvm",
                "compress",
                "--matrix",
                _matrix(tmp, __import__("numpy").full((32, 32), 1e-44)),
                "--nb",
                "16",
                "--out",
                str(tmp / "op.npz"),
            ],
            message="the operator's entries (largest 1e-44) lie below fp32's normal range",
            note="an error of 0.17 against --threshold 1e-3 written, exit 0",
        ),
        Case(
            "hunt64",
            "tlrmvm compress --matrix <timedelta64> (hunt 64)",
            lambda fx, tmp: [
                "hpc",
                "tlrmvm",
                "compress",
                "--matrix",
                _matrix(tmp, __import__("numpy").ones((32, 32), "timedelta64[s]")),
                "--nb",
                "16",
                "--out",
                str(tmp / "op.npz"),
            ],
            message="the operator must hold real or complex numbers, got dtype timedelta64[s]",
            note="a traceback",
        ),
        Case(
            "hunt64",
            "cfd --restart <a step file of u = 1e30> (hunt 64)",
            lambda fx, tmp: [
                *_RESTART,
                "--dt",
                "1e-9",
                "--out",
                _step_file(tmp, "step_0000021.npz", 21, 1e30),
            ],
            message="'s u holds 1e+30; its square overflows fp32",
            note="ran, then blamed --dt even at 1e-9",
        ),
        Case(
            "hunt64",
            "cfd --restart <step_0000500.npz holding step 20> (hunt 64)",
            lambda fx, tmp: [*_RESTART, "--out", _step_file(tmp, "step_0000500.npz", 20, 0.0)],
            message="holds step 20 (its name says 500); rename it step_0000020.npz",
            note="every restart redid the same steps",
        ),
    ]
    train = [
        Case("hunt64", "train data_dir=<a UTF-16 .txt> (hunt 64)", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={_docs(tmp, 'a.txt', 'hello world'.encode('utf-16'))}",
            "-o", str(tmp / "run")],
            message="is UTF-16 text (a BOM FF FE), not UTF-8; convert it: iconv -f utf-16 -t "
                    "utf-8", note="refused as binary"),
        Case("hunt64", "train data_dir=<a .txt past max_corpus_bytes> (hunt 64)",
             lambda fx, tmp: [*_TRAIN, "train_input.max_corpus_bytes=10000",
                              f"train_input.data_dir={_docs(tmp, 'a.txt', b'word ' * 4000)}",
                              "-o", str(tmp / "run")],
             # hunt 75: a .txt is a document a line, so its line past the cap is refused
             message="has a 'text' of 20,000 characters, past the split's max_corpus_bytes=10,000",
             note="read whole: 24 MB took 6.8 GB"),
        Case("hunt64", "train data_dir=<a .parquet whose footer is cut> (hunt 64)",
             lambda fx, tmp: [*_TRAIN, "train_input.data_dir=" + _docs(
                 tmp, "a.parquet", b"PAR1" + bytes(64) + b"PAR1"), "-o", str(tmp / "run")],
             message="is not a readable Parquet file", note="an 82-line pyarrow traceback"),
        Case("hunt64", "train optimizer.min_learning_rate=1.0 (hunt 64)", lambda fx, tmp: [
            *_TRAIN, "optimizer.min_learning_rate=1.0", "-o", str(tmp / "run")],
            message="optimizer.min_learning_rate=1.0 exceeds optimizer.learning_rate",
            note="the cosine decay rose 333x"),
        Case("hunt64", "train -o <a run whose tokenizer.json has no <|endoftext|>> (hunt 64)",
             lambda fx, tmp: [*_TRAIN, "-o", _run_without_eos(tmp)],
             message="has no '<|endoftext|>' token", note="a 58-line TypeError after 18 s"),
    ]  # fmt: skip
    return [*model, *view, *wafer, *runs, *hpc, *train]
