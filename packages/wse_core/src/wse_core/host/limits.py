"""The one table of limits: every size a user can give is bounded before it is used.

Contract. `LIMITS` names each bound a user's input meets (slots, devices, processes, GPUs,
wafer systems, batch and draft sizes, file sizes, YAML bytes and alias expansion, JSON depth,
chat-template work, an MD timestep, HPC time steps, the values of a sweep, XYZ and .npz
files, data folders), its value (a constant, or one computed from what this machine has), its
unit, and the environment variable that lifts it (`WSE_LIMIT_<NAME>`, a positive integer).
`check(name, value, what)` raises `LimitError` (a `WseError`: the `wse` command prints one
line and exits 2) naming the value, the limit and its override; nothing is allocated,
forked, looped over or imported before it. docs/limits.md is this table for users.

Sizes that turn into host memory are also checked by `wse_core.host.memory.require` (what the
machine has available; `WSE_HOST_MEMORY_BYTES` lowers it, nothing raises it). The readers
every file of the stack goes through (`read_text`, `load_json`, `load_yaml`) are
`wse_core.host.readers`. A check that keeps its own wording names the override with
`lift(name)`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import NamedTuple

from wse_core.errors import WseError, ascii_only, shown, suggest

__all__ = [
    "LimitError",
    "Limit",
    "LIMITS",
    "ENV_PREFIX",
    "VIRTUAL_DEVICE_HOST_BYTES",
    "limit",
    "lift",
    "refusal",
    "check",
    "check_variables",
]

ENV_PREFIX = "WSE_LIMIT_"
# Host memory one more virtual CPU device costs while a jitted program runs on all of them:
# (844 MB - 236 MB) / (512 - 8) devices, a (devices x 128) float32 sum under jit on a mesh
# of 8 and of 512 devices (max RSS, this 2-core host, 2026-11-28).
VIRTUAL_DEVICE_HOST_BYTES = 1_200_000
# The lowest Debye temperature of the metals: cesium's 38 K (Kittel, Introduction to Solid
# State Physics, 8th ed., Table 5.1); its Debye frequency kB * 38 K / h = 0.79 THz is the
# slowest highest lattice vibration of any metal.
LOWEST_DEBYE_TEMPERATURE_K = 38.0
BOLTZMANN_J_PER_K = 1.380649e-23  # exact (SI 2019)
PLANCK_J_S = 6.62607015e-34  # exact (SI 2019)
VERLET_STABLE_OMEGA_DT = 2.0  # velocity Verlet keeps a harmonic mode bounded iff omega dt < 2
MD_DT_MARGIN = 2.5  # the limit is this many times the bound (no metal is refused by luck)


class LimitError(WseError):
    """A size given by a user is beyond the stack's limit for it (the message names the
    override that lifts it). Raised by `refusal`, it carries its figures beside the line:
    `limit_name` (a key of `LIMITS`), `value` (as worded: "70,000,000 bytes") and `limit`
    (the count in force), so a caller rewording it reads fields, not the text; a refusal
    of a file's kind (a FIFO, a folder) carries None."""

    def __init__(
        self, message: str, *, limit_name: str | None = None, value: str | None = None,
        limit: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.limit_name, self.value, self.limit = limit_name, value, limit


class Limit(NamedTuple):
    """One bound: `value()` in `unit`, lifted by `$WSE_LIMIT_<NAME>`; `basis` says why."""

    name: str
    value: Callable[[], int]
    unit: str
    what: str
    basis: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _md_dt_fs() -> int:
    """fs: `MD_DT_MARGIN` x the velocity-Verlet stability bound (omega dt < 2) at the lowest
    Debye frequency of any metal (cesium's): past it no metal's vibrations stay bounded,
    rounding alone grows each step (a 0 K crystal reaches 1e17 K in 20 steps of 1 ns)."""
    import math

    omega = 2 * math.pi * BOLTZMANN_J_PER_K * LOWEST_DEBYE_TEMPERATURE_K / PLANCK_J_S  # rad/s
    return int(round(MD_DT_MARGIN * VERLET_STABLE_OMEGA_DT / omega * 1e15, -2))  # 1,000


def _devices() -> int:
    from wse_core.host.memory import available_bytes

    return max(8, min(1024, available_bytes() // VIRTUAL_DEVICE_HOST_BYTES))


LIMITS: dict[str, Limit] = {
    lim.name: lim
    for lim in (
        Limit(
            "serve_slots",
            lambda: 4096,
            "slots",
            "decode slots of one server",
            "16x vLLM's default max_num_seqs (256)",
        ),
        Limit(
            "serve_stop_strings",
            lambda: 64,
            "stop strings",
            "stop strings of one request (HTTP stop, gRPC stop, wse infer generate --stop)",
            "each is searched in the held-back text at every token: 64 of 1,024 characters "
            "cost 0.34 ms a token here, 256 1.6 ms; vLLM sets no bound, OpenAI 4 (hunt 79: "
            "4 was fixed, so an lm-eval task's longer `until` list was refused)",
        ),
        Limit(
            "serve_stop_token_ids",
            lambda: 64,
            "token ids",
            "distinct stop token ids of one request (HTTP stop_token_ids, gRPC stop_token_ids)",
            "each distinct count compiles the decode loop once more (10^5 ids were taken, hunt "
            "56); 64 is well past any model's end-of-sequence ids; vLLM sets no bound and drops "
            "repeats, as this count does (hunt 81: a fixed 64 counted repeats, no variable)",
        ),
        Limit(
            "devices",
            _devices,
            "devices",
            "virtual CPU devices of one process",
            "available host memory / VIRTUAL_DEVICE_HOST_BYTES (1.2 MB each), at most 1024 "
            "(a 512-device mesh takes 49 s to run one sum here), at least the tests' 8",
        ),
        Limit(
            "processes",
            _cores,
            "processes",
            "local processes of one `wse launch`",
            "the cores this process may use (more only time-share them)",
        ),
        Limit(
            "run_processes",
            lambda: 65_536,
            "processes",
            "processes of one multi-process run, on every host",
            "4x the largest one-process-per-GPU training runs reported (16,384 GPUs); process "
            "0's coordination service allocates for each before any joins",
        ),
        Limit(
            "gpus",
            lambda: 10**6,
            "GPUs",
            "GPUs of one planned cluster",
            "10x the largest GPU clusters announced (~100,000 GPUs)",
        ),
        Limit(
            "file_bytes",
            lambda: 64 << 20,
            "bytes",
            "a spec, params, config, tokenizer or template file read whole",
            "7x Llama 3's tokenizer.json (9 MB)",
        ),
        Limit(
            "yaml_bytes",
            lambda: 256 << 10,
            "bytes",
            "a YAML document (spec, params, speculative config) parsed",
            "160x the largest shipped params file (1.6 KB); PyYAML parses ~1.2 MB/s here "
            "(a 20 MB comment-only spec took 11 s), so 256 KiB parses in about 0.2 s",
        ),
        Limit(
            "yaml_nodes",
            lambda: 1_000_000,
            "nodes",
            "a YAML document's nodes with every alias expanded",
            "the largest shipped params file has < 100 nodes",
        ),
        Limit(
            "json_depth",
            lambda: 64,
            "levels",
            "nesting of a JSON or YAML file",
            "HF config.json and tokenizer.json nest <= 6 levels",
        ),
        Limit(
            "json_fields",
            lambda: 10_000,
            "fields",
            "top-level fields of one record (line) of a JSON-lines data file",
            "HF datasets' rows have < 100 fields; HF datasets makes a column of each field "
            "(one record of 200,000 fields took 65 s to load here)",
        ),
        Limit(
            "json_keys",
            lambda: 1_000,
            "field names",
            "distinct field names (keys at any depth) over one split's JSON-lines data files",
            "HF datasets' rows have < 100 fields; it makes a column (or struct field) of "
            "each name and fills every row's: ~0.1 us a row and name here (20,000 rows, each "
            "of its own field, took 47 s to load; 20,000 rows of 1,000 names 2 s)",
        ),
        Limit(
            "template_ops",
            lambda: 1_000_000,
            "loop iterations",
            "a chat template's loop iterations for one request",
            "a 10,000-message chat at 100 per message",
        ),
        Limit(
            "md_dt_fs",
            _md_dt_fs,
            "fs",
            "the timestep of an MD run",
            "2.5x velocity Verlet's stability bound (omega dt < 2) at cesium's Debye frequency "
            "(0.79 THz, the lowest of the metals: 402 fs), to 100 fs; LAMMPS metal runs use 1-5 fs",
        ),
        Limit(
            "time_steps",
            lambda: 10_000_000,
            "steps",
            "time steps (or solver iterations) of one HPC run",
            "10x the longest published wafer runs reproduced here (~10^6 steps); the "
            "emulator's fastest step (jacobi on 8^3 cells) takes ~0.25 ms here, so the limit "
            "is ~40 min of it, while 2**31 steps ran for days",
        ),
        Limit(
            "sweep_values",
            lambda: 64,
            "values",
            "settings of one `--sweep` (each reruns every prediction)",
            "the shipped plausible ranges have at most 5; a table of 64 columns is unreadable",
        ),
        Limit(
            "template_ms",
            lambda: 2000,
            "ms",
            "one chat template render",
            "the front ends answer within 2 s",
        ),
        Limit(
            "template_chars",
            lambda: 64 << 20,
            "characters",
            "strings and lists one chat template render builds",
            "30x a 2 MiB request body; one 'x' * 300000000 held 1.2 GB",
        ),
        Limit(
            "systems",
            lambda: 20_480,
            "systems",
            "wafer systems of one plan or training run",
            "10x the 2,048 CS-3 of Cerebras' largest cluster",
        ),
        Limit(
            "batch_size",
            lambda: 1 << 20,
            "sequences",
            "a params file's batch_size",
            "~700x GPT-3's 1,536 sequences (3.2M tokens of 2,048); 2**63 ran past a minute",
        ),
        Limit(
            "gamma",
            lambda: 64,
            "tokens",
            "drafted tokens per speculative round",
            "vLLM's examples draft 1-8 tokens a round",
        ),
        Limit(
            "xyz_bytes",
            lambda: 8 << 30,
            "bytes",
            "an extended XYZ file read",
            "a frame of xyz_atoms atoms at ~80 characters a line",
        ),
        Limit(
            "xyz_atoms",
            lambda: 100_000_000,
            "atoms",
            "atoms of one extended XYZ frame",
            "~110x a WSE-3's 900,000 PEs at one atom per PE",
        ),
        Limit(
            "npz_members",
            lambda: 1_000,
            "arrays",
            "arrays of one .npz read",
            "each header is read before any data (200,000 members took 30 s); the stack "
            "writes < 40",
        ),
        Limit(
            "npz_inflation",
            lambda: 100,
            "x",
            "inflation of an .npz member over 64 MiB (its size / its compressed size)",
            "deflate's best is ~1,032x (zeros: a zip bomb); np.savez stores arrays at 1x",
        ),
        Limit(
            "data_files",
            lambda: 100_000,
            "files",
            "data files of one training split's folder",
            "a corpus of more files is packed into .jsonl or .parquet shards first",
        ),
        Limit(
            "data_entries",
            lambda: 1_000_000,
            "entries",
            "folder entries walked to find a split's data files",
            "10x data_files; data_dir=/ walked the whole filesystem",
        ),
        Limit(
            "data_folders",
            lambda: 10_000,
            "folders",
            "folders below a split's data_dir walked to find its data files",
            "a folder per 10 data files at data_files; data_dir=/ read 48,000 folders "
            "(3.5 s with a cold cache) before data_files refused it",
        ),
        Limit(
            "step_files",
            lambda: 10_000,
            "step files",
            "step files (an .npz and a .vtk each) one CFD run writes",
            "a ParaView series of 10,000 frames is already past reading; --steps 3,000,000 "
            "--output-every 1 wrote 142,480 files in 90 s",
        ),
        Limit(
            "tlr_tiles",
            lambda: 100_000,
            "tiles",
            "tiles of one TLR operator",
            "compress runs an SVD per tile in Python (~0.15 ms for a tiny one here: 100,000 "
            "~15 s) and the planner colours every rank row; the paper's 9801 x 9801 operator "
            "has 1,521 (nb 256) to 19,881 (nb 70); --nb 1 (1,048,576 tiles) ran for minutes",
        ),
    )
}


def limit(name: str) -> int:
    """The limit in force: `$WSE_LIMIT_<NAME>` when set, else the table's value."""
    lim = LIMITS[name]
    raw = os.environ.get(lim.env)
    if raw is None or raw == "":
        return int(lim.value())
    try:  # "1e6" is a million; "1.5" is no count (hunt 58: it was read as 1)
        number = float(ascii_only(raw))  # hunt 61: '١٠' was read as 10
        value = int(raw) if raw.strip().isdigit() else int(number) if number.is_integer() else 0
    except ValueError:  # not a number, or digits past int()'s 4300
        value = 0
    if not 1 <= value < 2**63:
        raise WseError(f"{lim.env} must be a positive integer of at most 64 bits, got {shown(raw)}")
    return value


def check_variables(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a `WSE_LIMIT_*` naming no limit (a misspelt one lifted nothing) or no count."""
    known = {lim.env: name for name, lim in LIMITS.items()}
    for env in sorted(environ):
        if env.startswith(ENV_PREFIX) and env not in known:
            raise WseError(f"{env} is no limit{suggest(env, known)}; see docs/limits.md")
        if env in known:
            limit(known[env])


def lift(name: str) -> str:
    """The words naming limit `name`'s override: 'set WSE_LIMIT_<NAME> to lift it'."""
    return f"set {LIMITS[name].env} to lift it"


def refusal(name: str, what: str, value: int | str) -> LimitError:
    """The error for `what` (`--max-num-seqs 10**9`) past limit `name`."""
    lim, cap = LIMITS[name], limit(name)
    return LimitError(
        f"{what} is {value}, over the limit of {cap:,} {lim.unit} ({lim.what}); "
        f"set {lim.env} to lift it",
        limit_name=name, value=str(value), limit=cap,
    )  # fmt: skip


def check(name: str, value: int, what: str) -> None:
    """Raise `LimitError` when `value` exceeds limit `name`."""
    if value > limit(name):
        raise refusal(name, what, f"{value:,}")
