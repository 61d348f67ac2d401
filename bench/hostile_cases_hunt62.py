"""The CLI refusals of session 62 (hunts 62 and 63, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_cli_hostile_hunt62_serve.py
(`wse infer generate`; `serve` is the served class's), _hunt62_train.py (those needing no
trained run), _hunt62_hpc.py, _hunt62_launch.py (the cheap refusals of commands that do not
span processes, and the experiments and demo --out collisions), test_cli_hostile_hunt63_plan.py,
_hunt63_hpc.py, and hunt 61's leftover of JSON records naming too many fields. One case per
distinct refusal, each writing the files it needs into its own temporary folder. Select them
with `--only '(hunt 62)'` and `--only '(hunt 63)'`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from hostile_cases import Case, Fixtures, _const
from hostile_cases_found import _setfl
from hostile_cases_more import _TRAIN
from wse_models.testing import LLAMA3_8B_HF
from wse_trainer.testing import narrow_jsonl, text_docs

# test_cli_hostile_hunt62_train.py's QUICK run
_QUICK = ["train", "tiny", "runconfig.max_steps=2", "model.vocab_size=300",
          "train_input.batch_size=2", "runconfig.sample_tokens=0"]  # fmt: skip
_LAUNCH = ["launch", "--nproc", "2", "--devices-per-proc", "1", "--"]
_LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]
_CUTOFF = "5.7157519935018186e+00"  # zhou04 Cu's, on line 5 of the fixtures' potential
_BIG = "1" + "0" * 400  # an integer no float holds: 401 digits


def _generate(model: str, *extra: str) -> list[str]:
    return ["infer", "generate", "--model-dir", model, *extra]


def _copy(fx: Fixtures, dst: Path, bpe: bool = False) -> Path:
    """The fixtures' tiny model as `dst` (with a byte-level BPE tokenizer.json if `bpe`)."""
    shutil.copytree(fx.model(), dst, dirs_exist_ok=True)
    if bpe:
        from wse_inference.testing import save_byte_bpe

        save_byte_bpe(dst / "tokenizer.json")
    return dst


def _here(fx: Fixtures, tmp: Path) -> str:
    """The tiny model copied into `tmp`, the case's working folder: '.' names it."""
    _copy(fx, tmp)
    return "."


def _with_file(fx: Fixtures, tmp: Path, name: str, data: bytes, bpe: bool = True) -> str:
    m = _copy(fx, tmp / "m", bpe=bpe)
    (m / name).write_bytes(data)
    return str(m)


def _overflowing(fx: Fixtures, tmp: Path) -> str:
    """The tiny model whose head and norm are finite but whose logits overflow."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    m = _copy(fx, tmp / "huge")
    tensors = load_file(m / "model.safetensors")
    head = "lm_head.weight" if "lm_head.weight" in tensors else "model.embed_tokens.weight"
    tensors[head] = tensors[head] * np.float32(1e37)
    tensors["model.norm.weight"] = tensors["model.norm.weight"] * np.float32(1e4)
    save_file(tensors, m / "model.safetensors")
    return str(m)


def _dangling_tokenizer(fx: Fixtures, tmp: Path) -> str:
    """The tiny model whose tokenizer.json links to nowhere (a partly fetched HF snapshot)."""
    m = _copy(fx, tmp / "m")
    (m / "tokenizer.json").symlink_to(tmp / "missing" / "tokenizer.json")
    return str(m)


def _run_with(tmp: Path, make) -> str:  # noqa: ANN001
    """A run folder `tmp/run` holding what `make` puts there."""
    run = tmp / "run"
    run.mkdir()
    make(run)
    return str(run)


def _params(tmp: Path, old: str, new: str, name: str = "tiny") -> str:
    from wse_trainer.config import shipped_config

    text = shipped_config(name).read_text()
    assert old in text, (name, old)
    (tmp / "p.yaml").write_text(text.replace(old, new))
    return str(tmp / "p.yaml")


def _other_shuffle_seed(tmp: Path) -> str:
    """A run folder whose checkpoint step 2 was trained with shuffle_seed 1."""
    import dataclasses

    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    config = load_config("tiny", _QUICK[2:])
    model = json.loads(json.dumps(dataclasses.asdict(model_config(config))))
    step = tmp / "run" / "checkpoints" / "2"
    (step / "meta").mkdir(parents=True)
    meta = {"step": 2, "model": model, "data": {"seed": 1, "epoch": 0, "index": 2}}
    (step / "meta" / "metadata").write_text(json.dumps(meta))
    return str(tmp / "run")


def _spec(tmp: Path, text: str) -> str:
    (tmp / "s.yaml").write_text(text)
    return str(tmp / "s.yaml")


def _twice_yaml(tmp: Path) -> str:
    """tiny.yaml with eval_input merged from train_input and eval_steps given twice."""
    from wse_trainer.config import shipped_config

    text = shipped_config("tiny").read_text().replace("train_input:\n", "train_input: &inp\n")
    eval_part = text[text.index("eval_input:\n") : text.index("model:\n")]
    merged = text.replace(eval_part, "eval_input:\n  <<: *inp\n  eval_steps: 4\n  eval_steps: 5\n")
    (tmp / "twice.yaml").write_text(merged)
    return str(tmp / "twice.yaml")


def _overflowing_matrix(tmp: Path) -> str:
    import numpy as np

    np.save(tmp / "m.npy", np.full((32, 32), 3e38, np.float32))
    return str(tmp / "m.npy")


def _moving_crystal(tmp: Path, vx: float) -> str:
    import numpy as np
    from wse_hpc.md import crystal, write_xyz

    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    v = np.random.default_rng(0).standard_normal(s.positions_A.shape) * 0.5
    v[0, 0] = vx
    s = type(s)(s.symbols, s.positions_A, s.box_A, velocities_A_ps=v)
    return str(write_xyz(tmp / "in.xyz", [s]))


_CFD = ["hpc", "cfd", "--preset", "small", "--grid", "16", "8", "1", "--steps", "2"]


def _cfd_run(fx: Fixtures, tmp: Path) -> str:
    """A 2-step Rayleigh-Benard series in `tmp/o`."""
    fx._wse(*_CFD, "--out", str(tmp / "o"))
    return str(tmp / "o")


def _with_entries(tmp: Path, name: str, entries: dict[str, str]) -> str:
    (tmp / name).mkdir()
    for entry, text in entries.items():
        (tmp / name / entry).write_text(text)
    return str(tmp / name)


def _hf(tmp: Path, edit: dict | None = None, text: str | None = None, number: str = "") -> str:
    """An HF folder of Llama 3 8B's config.json with `edit` (None: the key removed), or `text`;
    the edit's 12345 becomes `number` (one that Python's json does not write)."""
    if text is None:
        d = {k: v for k, v in {**LLAMA3_8B_HF, **(edit or {})}.items() if v is not None}
        text = json.dumps(d)
    if number:
        text = text.replace("12345", number)
    (tmp / "hf").mkdir()
    (tmp / "hf" / "config.json").write_text(text)
    return str(tmp / "hf")


def _config_of(fx: Fixtures, tmp: Path, text: str) -> str:
    m = _copy(fx, tmp / "model")
    (m / "config.json").write_text(text)
    return str(m)


def _wafer_spec(tmp: Path, field: str) -> str:
    import yaml
    from wse_core import preset

    spec = preset("wse3").to_dict()
    spec[field] = int(_BIG)
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    return str(tmp / "spec.yaml")


def _md(pot: str, *extra: str) -> list[str]:
    return ["hpc", "md", *_LATTICE, "--potential", pot, *extra]


def hunt62_cases() -> list[Case]:
    """Session 62's refusals: each failed on the code before (the note says how)."""
    gen = ["--prompt", "hi", "--max-tokens", "2"]
    rope = {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 12345}
    serve = [
        Case("hunt62", "infer generate <logits overflow> (hunt 62)", lambda fx, tmp: _generate(
            _overflowing(fx, tmp), "--prompt-ids", "1,2", "--max-tokens", "2"),
            message="the model's log probabilities are not finite",
            note="exit 0, printing NUL characters"),
        Case("hunt62", "infer generate <tokenizer.json a broken link> (hunt 62)",
             lambda fx, tmp: _generate(_dangling_tokenizer(fx, tmp), *gen),
             message="tokenizer.json' is a broken link", note="passed over for the byte tokenizer"),
        Case("hunt62", "infer generate <generation_config.json not JSON> (hunt 62)",
             lambda fx, tmp: _generate(_with_file(fx, tmp, "generation_config.json",
                                                  b'{"eos_token_id": [1, 2],}'), *gen),
             message="generation_config.json': Expecting",
             note="passed over: generation ran past the model's end tokens"),
        Case("hunt62", "infer generate <eos_token_id true> (hunt 62)", lambda fx, tmp: _generate(
            _with_file(fx, tmp, "generation_config.json", b'{"eos_token_id": true}'), *gen),
            message="eos_token_id True; it must be a token", note="read as id 1"),
        Case("hunt62", "infer generate <tokenizer_config.json a list> (hunt 62)",
             lambda fx, tmp: _generate(_with_file(fx, tmp, "tokenizer_config.json", b"[1, 2]"),
                                       *gen),
             message="tokenizer_config.json' holds a JSON list",
             note="Python's own words, blamed on tokenizer.json"),
        Case("hunt62", "infer generate --speculative-config '{\"model\": \"\"}' (hunt 62)",
             lambda fx, tmp: _generate(_here(fx, tmp), "--speculative-config", json.dumps(
                 {"model": "", "num_speculative_tokens": 2}), *gen),
             message="'s model must name the draft's folder, got an empty name",
             note="'' read as '.', the current folder"),
        Case("hunt62", "infer generate --prompt <200 tokens> (hunt 62)", lambda fx, tmp: _generate(
            fx.model(), "--prompt", "x" * 200, "--max-tokens", "2"),
            message="the prompt alone fills it: shorten it to at most 127 tokens",
            note="counted as 1 token (\"lower max_tokens to <= 0\")"),
    ]  # fmt: skip
    train = [
        Case("hunt62", "train -o <run with a folder run.log> (hunt 62)", lambda fx, tmp: [
            *_QUICK, "-o", _run_with(tmp, lambda r: (r / "run.log").mkdir())],
            message="run.log' is a folder, not a regular file: a run writes its run.log file "
                    "there; move it away, or give a new model_dir (-o)",
            note="a traceback after the tokenizer"),
        Case("hunt62", "train -o <run with a FIFO tokenizer.json> (hunt 62)", lambda fx, tmp: [
            *_QUICK, "-o", _run_with(tmp, lambda r: os.mkfifo(r / "tokenizer.json"))],
            message="tokenizer.json' is a FIFO, not a regular file", note="hung"),
        Case("hunt62", "plan train -m <params num_csx 0> (hunt 62)", lambda fx, tmp: [
            "plan", "train", "--tokens", "1e9", "--model", _params(
                tmp, "num_csx: 1", "num_csx: 0")],
            message="runconfig.num_csx must be positive, got 0", note="ZeroDivisionError"),
        Case("hunt62", "plan train -m <params max_seq_len 64> (hunt 62)", lambda fx, tmp: [
            "plan", "train", "--tokens", "1e9", "--model", _params(
                tmp, "max_seq_len: 256", "max_seq_len: 64")],
            message="train_input.max_sequence_length=128 exceeds the model's max_seq_len=64; "
                    "use at most 64", note="planned"),
        Case("hunt62", "train eval_input.eval_steps=0 (hunt 62)", lambda fx, tmp: [
            "train", "tiny", "eval_input.eval_steps=0", "-o", str(tmp / "run")],
            message="eval_input.eval_steps must be positive (batches per evaluation), got 0",
            note="evaluated nothing: a NaN loss, exit 0"),
        Case("hunt62", "train runconfig.seed=2**64 (hunt 62)", lambda fx, tmp: [
            "train", "tiny", "runconfig.seed=18446744073709551616", "-o", str(tmp / "run")],
            message="runconfig.seed must be a 64-bit integer in [-9223372036854775808, "
                    "9223372036854775807], got 18446744073709551616",
            note="jax.random.key's OverflowError after the run folder was made"),
        Case("hunt62", "train -o <a folder inside its data_dir> (hunt 62)", lambda fx, tmp: [
            *_QUICK, f"train_input.data_dir={text_docs(tmp / 'docs')}", "--mode", "train", "-o",
            str(tmp / "docs" / "run")],
            message="' is inside train_input.data_dir '",
            note="refused as a data_dir that \"mixes file kinds\""),
        Case("hunt62", "train shuffle_seed=5 on a checkpoint of seed 1 (hunt 62)",
             lambda fx, tmp: [*_QUICK, "train_input.shuffle_seed=5", "--mode", "train", "-o",
                              _other_shuffle_seed(tmp)],
             message="was trained with train_input.shuffle_seed=1, 5 here; resume with "
                     "train_input.shuffle_seed=1, or give a new model_dir (-o)",
             note="refused by the data iterator's restore after the tokenizer (8.7 s)"),
        Case("hunt62", "train data_dir=<records naming 1,201 fields> (hunt 62)", lambda fx, tmp: [
            *_TRAIN, f"train_input.data_dir={narrow_jsonl(tmp / 'docs')}", "-o", str(tmp / "run")],
            message="the split's JSON records name 1,201 distinct fields by line 600 of data "
                    "file '", note="20,001 columns of HF datasets: 47 s to load"),
    ]  # fmt: skip
    hpc = [
        Case("hunt62", "wafer info --spec <defect_rate: [0.1]> (hunt 62)", lambda fx, tmp: [
            "wafer", "info", "--spec", _spec(tmp, "base: wse3\ndefect_rate: [0.1]\n")],
            message="defect_rate must be a number (int or float), got [0.1] (list)",
            note="a 72-line TypeError traceback"),
        Case("hunt62", "wafer info --set program_rows=100000 (hunt 62)", _const(
            "wafer", "info", "-p", "wse2", "--set", "program_rows=100000"),
            message="program_rows must be at most pe_rows (757), got 100,000", note="priced"),
        Case("hunt62", "train <params with a key twice under a merge> (hunt 62)",
             lambda fx, tmp: ["train", _twice_yaml(tmp), "--validate-only"],
             message="duplicate key 'eval_steps'", note="merge keys were \"not valid YAML\""),
        Case("hunt62", "tlrmvm compress --matrix <3e38 everywhere> (hunt 62)", lambda fx, tmp: [
            "hpc", "tlrmvm", "compress", "--matrix", _overflowing_matrix(tmp), "--nb", "16",
            "--out", str(tmp / "op.npz")],
            message="tile (0, 0) has norm 4.8e+39, past fp32's largest value"),
        Case("hunt62", "md --structure <velocities of 1e300 A/ps> (hunt 62)", lambda fx, tmp: [
            "hpc", "md", "--structure", _moving_crystal(tmp, 1e300), "--potential",
            fx.potential(), "--steps", "0", "--json", "--preset", "small", "--out",
            str(tmp / "traj.xyz")],
            message="initial temperature of inf K, past 1e+05 K",
            note="printed \"ke\": Infinity (invalid JSON), exit 0"),
        Case("hunt62", "cfd --restart --case cavity on a Rayleigh-Benard series (hunt 62)",
             lambda fx, tmp: [*_CFD, "--case", "cavity", "--out", _cfd_run(fx, tmp),
                              "--restart"],
             message="is a step of case 'rayleigh-benard'; this run's case is 'cavity' "
                     "(restart with --case rayleigh-benard, or give a new --out)",
             note="continued the series as a cavity"),
        Case("hunt62", "md potential --knots 99 (hunt 62)", lambda fx, tmp: [
            "hpc", "md", "potential", "--elements", "Cu", "--knots", "99", "--out",
            str(tmp / "p.eam.alloy")],
            message="--knots must be an integer in [100, 100000], got 99",
            note="the help allowed 2 and the check said \"at least 100\""),
    ]  # fmt: skip
    spanning = "launch one that does: hpc md, hpc stencil, hpc swe, train, wafer check"
    launch = [
        Case("hunt62", "launch 2 -- hpc cfd (hunt 62)", _const(
            *_LAUNCH, "hpc", "cfd", "--grid", "16", "8", "1", "--steps", "100"),
            message=f"run `wse hpc cfd` alone, or {spanning}",
            note="a traceback in every child"),
        Case("hunt62", "experiments run --out <a file wafer-yield there> (hunt 62)",
             lambda fx, tmp: ["experiments", "run", "wafer-yield", "--quick", "--out",
                              _with_entries(tmp, "o", {"wafer-yield": "x\n"})],
             message="holds 'wafer-yield', which is not a folder",
             note="a FileExistsError after the run"),
        Case("hunt62", "demo --out <a folder of files named like the demo's> (hunt 62)",
             lambda fx, tmp: ["demo", "--quick", "--out", _with_entries(
                 tmp, "d", {"md_cu.xyz": "mine\n", "defects.png": "precious\n"})],
             message="holds 'defects.png'", note="the user's files overwritten"),
    ]  # fmt: skip
    plan = [
        Case("hunt63", "plan infer -m <config.json architectures 5> (hunt 63)", lambda fx, tmp: [
            "plan", "infer", "-m", _hf(tmp, {"architectures": 5, "model_type": None})],
            message="config.json's architectures must be a list of strings, got 5",
            note="a traceback"),
        Case("hunt63", "infer generate <config.json [1, 2]> (hunt 63)", lambda fx, tmp: [
            "infer", "generate", "--model-dir", _config_of(fx, tmp, "[1, 2]"), "--prompt", "hi"],
            message="config.json must hold a JSON object", note="a traceback"),
        Case("hunt63", "plan infer -m <rope original_max_position_embeddings 1e400> (hunt 63)",
             lambda fx, tmp: ["plan", "infer", "-m", _hf(
                 tmp, {"rope_scaling": rope, "rope_parameters": None}, number="1e400")],
             message="rope_scaling.original_max_position_embeddings in config.json must be a "
                     "finite number, got inf", note="a traceback"),
        Case("hunt63", "train <params n_layers of 401 digits> (hunt 63)", lambda fx, tmp: [
            "train", _params(tmp, "n_layers: 4\n", f"n_layers: {_BIG}\n"), "--validate-only"],
            message="got a 401-digit integer", note="an OverflowError traceback"),
        Case("hunt63", "wafer info --spec <clock_hz of 401 digits> (hunt 63)", lambda fx, tmp: [
            "wafer", "info", "--spec", _wafer_spec(tmp, "clock_hz")],
            message="clock_hz must be a finite number, got a 401-digit integer",
            note="math.isfinite's OverflowError traceback"),
        Case("hunt63", "plan train -m gpt2_124m --seq-len 4096 (hunt 63)", _const(
            "plan", "train", "-m", "gpt2_124m", "--tokens", "1e12", "--seq-len", "4096"),
            message="--seq-len 4096 exceeds the model's max_seq_len=1024; use at most 1024",
            note="planned past GPT-2's 1,024 positions"),
        Case("hunt63", "plan infer -m llama3-405b --gpus 12 (hunt 63)", _const(
            "plan", "infer", "-m", "llama3-405b", "--gpus", "12"),
            message="so 12 GPUs make replicas of at most 4", note="refused as \"1 x H100\""),
    ]  # fmt: skip
    hpc63 = [
        Case("hunt63", "md <setfl with dr 1e-300> (hunt 63)", lambda fx, tmp: _md(_setfl(
            fx, tmp, 4, f"1000 1.001e-01 1000 1e-300 {_CUTOFF}"), "--steps", "0", "--json",
            "--out", str(tmp / "rt.xyz")),
            message="line 5: dr = 1e-300 is below fp32's smallest normal number 1.18e-38",
            note="\"press\": -Infinity and NaN forces, exit 0"),
        Case("hunt63", "md <setfl whose r table ends short of the cutoff> (hunt 63)",
             lambda fx, tmp: _md(_setfl(fx, tmp, 4, f"1000 1.001e-01 1000 1e-3 {_CUTOFF}"),
                                 "--steps", "0", "--json", "--out", str(tmp / "rt.xyz")),
             message="line 5: the r table ends at (Nr - 1) * dr = 0.999 A, short of the cutoff "
                     "5.716 A", note="ran to PE -0.02 eV"),
        Case("hunt63", "md --damp-fs 1e300 (hunt 63)", lambda fx, tmp: _md(
            fx.potential(), "--steps", "4", "--thermostat", "nose-hoover", "--temperature-K",
            "300", "--damp-fs", "1e300", "--out", str(tmp / "t.xyz")),
            message="--damp-fs must be a finite number in (0, 10000000000] (fs), got 1e300",
            note="an OverflowError traceback"),
        Case("hunt63", "cfd --ra 1e-100 (hunt 63)", lambda fx, tmp: [
            "hpc", "cfd", "--ra", "1e-100", "--steps", "2", "--grid", "8", "8", "1", "--preset",
            "small", "--out", str(tmp / "o")],
            message="--ra must be a finite number in [1, 1e+17], got 1e-100",
            note="three lines naming a --dt never given"),
        Case("hunt63", "experiments run tco-training --sweep calibration.clock_hz=1e6,1e11 "
             "(hunt 63)",
             lambda fx, tmp: ["experiments", "run", "tco-training", "--sweep",
                              "calibration.clock_hz=1e6,1e11", "--out", str(tmp / "o")],
             message="calibration.clock_hz=1e+11 takes the refit of ",
             note="named only the constant (hunt 66: the calibration's clock is spelt so)"),
        Case("hunt63", "wafer defects --defect-rate 0.5 --set defect_rate=0.1 (hunt 63)", _const(
            "wafer", "defects", "--defect-rate", "0.5", "--set", "defect_rate=0.1"),
            message="--defect-rate 0.5 and --set defect_rate=0.1 both give the dead-PE rate; "
                    "give one of them", note="--defect-rate silently won"),
        Case("hunt63", "wafer defects --set flops_per_cycle=5 (hunt 63)", _const(
            "wafer", "defects", "--set", "flops_per_cycle=5"),
            message="--set flops_per_cycle: flops_per_cycle is a mapping and --set takes one "
                    "value a field; give the whole mapping in a --spec FILE",
            note="refused both as a number and as a mapping"),
    ]  # fmt: skip
    return [*serve, *train, *hpc, *launch, *plan, *hpc63]
