"""The one table of limits: every size a user can give is bounded before it is used.

Contract. `LIMITS` names each bound a user's input meets (slots, devices, processes, GPUs,
file sizes, YAML bytes and alias expansion, JSON depth, chat-template work, an MD timestep,
the values of a sweep), its value (a constant, or one computed from what this machine has), its
unit, and the environment variable that lifts it (`WSE_LIMIT_<NAME>`, a positive integer).
`check(name, value, what)` raises `LimitError` (a `WseError`: the `wse` command prints one
line and exits 2) naming the value, the limit and its override; nothing is allocated,
forked, looped over or imported before it. docs/limits.md is this table for users.

Sizes that turn into host memory are also checked by `wse_core.host.memory.require` (what the
machine has available; `WSE_HOST_MEMORY_BYTES` lowers it, nothing raises it).

The readers every file of the stack goes through:
- `read_text(path, what)`: a regular file's text, at most `file_bytes` (`/dev/zero` and a
  FIFO are refused before a byte is read; a file growing while read is cut at the limit);
- `load_json(text, what)`: JSON nested at most `json_depth` levels (counted on the text,
  without recursion, before the parser runs), each object's keys distinct (`json_keys`);
- `load_yaml(text, what, loader=...)`: YAML of at most `yaml_bytes` (refused before PyYAML,
  which parses ~1.2 MB/s) whose node count, every alias expanded, is at
  most `yaml_nodes` (counted on the composed graph, linear in its distinct nodes, before any
  Python object is built; a recursive alias is refused), nested at most `json_depth` levels
  (flow brackets counted on the text before PyYAML's scanner, which is quadratic in them),
  each mapping's keys distinct text (`names_loader`: a key twice or `1: 2` is refused).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from wse_core.errors import WseError, suggest
from wse_core.host.json_keys import distinct_keys

__all__ = [
    "LimitError",
    "Limit",
    "LIMITS",
    "ENV_PREFIX",
    "VIRTUAL_DEVICE_HOST_BYTES",
    "limit",
    "check",
    "check_variables",
    "read_text",
    "load_json",
    "load_yaml",
    "text_depth",
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
    override that lifts it)."""


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
    )
}


def limit(name: str) -> int:
    """The limit in force: `$WSE_LIMIT_<NAME>` when set, else the table's value."""
    lim = LIMITS[name]
    raw = os.environ.get(lim.env)
    if raw is None or raw == "":
        return int(lim.value())
    try:  # "1e6" is a million; "1.5" is no count (hunt 58: it was read as 1)
        number = float(raw)
        value = int(raw) if raw.strip().isdigit() else int(number) if number.is_integer() else 0
    except ValueError:  # not a number, or digits past int()'s 4300
        value = 0
    if not 1 <= value < 2**63:
        raise WseError(f"{lim.env} must be a positive integer of at most 64 bits, got {raw!r}")
    return value


def check_variables(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a `WSE_LIMIT_*` naming no limit (a misspelt one lifted nothing) or no count."""
    known = {lim.env: name for name, lim in LIMITS.items()}
    for env in sorted(environ):
        if env.startswith(ENV_PREFIX) and env not in known:
            raise WseError(f"{env} is no limit{suggest(env, known)}; see docs/limits.md")
        if env in known:
            limit(known[env])


def refusal(name: str, what: str, value: int | str) -> LimitError:
    """The error for `what` (`--max-num-seqs 10**9`) past limit `name`."""
    lim = LIMITS[name]
    return LimitError(
        f"{what} is {value}, over the limit of {limit(name):,} {lim.unit} ({lim.what}); "
        f"set {lim.env} to lift it"
    )


def check(name: str, value: int, what: str) -> None:
    """Raise `LimitError` when `value` exceeds limit `name`."""
    if value > limit(name):
        raise refusal(name, what, f"{value:,}")


def read_text(path: str | Path, what: str) -> str:
    """A regular file's UTF-8 text, at most `file_bytes`; OSError / UnicodeDecodeError pass
    through for the caller to phrase, size and kind refusals are `LimitError`."""
    path = Path(path)
    cap = limit("file_bytes")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):  # before open: a FIFO's open blocks until a writer comes
        kind = "a folder" if stat.S_ISDIR(mode) else "a device, FIFO or socket"
        raise LimitError(f"{what} {str(path)!r} is {kind}, not a regular file")
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise LimitError(f"{what} {str(path)!r} is not a regular file")
        if st.st_size > cap:
            raise refusal("file_bytes", f"{what} {str(path)!r}", f"{st.st_size:,} bytes")
        raw = _read_at_most(f, cap + 1)  # a byte past the cap: a file growing while read
    if len(raw) > cap:
        raise refusal("file_bytes", f"{what} {str(path)!r}", f"over {cap:,} bytes")
    return raw.decode("utf-8")


def _read_at_most(f: Any, n: int, chunk: int = 1 << 24) -> bytes:
    """Up to `n` bytes of `f` (`f.read(n)` allocates n bytes: hunt 58's MemoryError at 1e12)."""
    parts, got = [], 0
    while got < n and (part := f.read(min(n - got, chunk))):
        parts.append(part)
        got += len(part)
    return b"".join(parts)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included


def text_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text (outside strings), without parsing it:
    strings removed by one regular expression, then a running sum over the brackets."""
    import numpy as np

    codes = np.frombuffer(_JSON_STRING.sub("", text).encode(), dtype=np.uint8)
    step = np.isin(codes, _OPEN).astype(np.int64) - np.isin(codes, _CLOSE)
    return int(np.cumsum(step).max(initial=0))


_OPEN, _CLOSE = (ord("["), ord("{")), (ord("]"), ord("}"))


def load_json(text: str | bytes, what: str) -> Any:
    """JSON within `json_depth` (checked on the text first); ValueError for malformed JSON."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    depth = text_depth(text)
    if depth > limit("json_depth"):
        raise refusal("json_depth", f"the nesting of {what}", f"{depth:,} levels")
    return json.loads(text, object_pairs_hook=distinct_keys)  # a key twice: ValueError


def _expanded_nodes(root: Any, what: str) -> tuple[int, int]:
    """(nodes, depth) of a composed YAML graph with every alias expanded (memoized per node,
    so linear in distinct nodes); a node reachable from itself is a recursive alias."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids = _children(node)
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(k)] for k in kids)
            nested = isinstance(node.value, list)  # a sequence or mapping ([] counts 1)
            depths[key] = 1 + max((depths[id(k)] for k in kids), default=0) if nested else 0
            continue
        if key in sizes:
            continue
        if key in open_:
            raise LimitError(f"{what} has a recursive YAML alias (a node inside itself)")
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)], depths[id(root)]


def _children(node: Any) -> list[Any]:
    value = node.value
    if not isinstance(value, list):
        return []
    if value and isinstance(value[0], tuple):
        return [n for pair in value for n in pair]
    return list(value)


_NAMES_LOADER: list[Any] = []  # built on first use: importing yaml costs `wse --help` time


def names_loader() -> Any:
    """`yaml.SafeLoader` whose mappings have distinct text keys: a key given twice (PyYAML
    keeps the last one silently) and a key that is not text (`1: 2`, `? [a, b]`: unhashable,
    or not a field name) are a `yaml.constructor.ConstructorError` at the key's line."""
    if not _NAMES_LOADER:
        import yaml

        class NamesLoader(yaml.SafeLoader):
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                seen: set[str] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    line = key_node.start_mark.line + 1
                    if not isinstance(key_node, yaml.ScalarNode):
                        why = f"the key at line {line} is a {key_node.id}; keys are names"
                    elif not isinstance(key, str):
                        why = f"key {key!r:.40} at line {line} is not a name; keys are text"
                    elif key in seen:
                        why = f"duplicate key {key[:40]!r} at line {line}; keep one"
                    else:
                        seen.add(key)
                        continue
                    raise yaml.constructor.ConstructorError(problem=why)
                return super().construct_mapping(node, deep=deep)

        _NAMES_LOADER.append(NamesLoader)
    return _NAMES_LOADER[0]


def load_yaml(text: str, what: str, loader: Any = None) -> Any:
    """YAML through `loader` (default `names_loader()`: distinct text keys) within
    `yaml_nodes` expanded nodes and `json_depth` levels; yaml.YAMLError passes through for
    the caller to phrase."""
    size = len(text) if len(text) * 4 <= limit("yaml_bytes") else len(text.encode())
    if size > limit("yaml_bytes"):  # before any parsing: PyYAML reads ~1.2 MB/s (hunt 55)
        raise refusal("yaml_bytes", what, f"{size:,} bytes")
    depth = text_depth(text)  # flow [ { nesting, before PyYAML's scanner (quadratic in it)
    if depth > limit("json_depth"):
        raise refusal("json_depth", f"the nesting of {what}", f"{depth:,} levels")
    loader_cls = loader or names_loader()
    ld = loader_cls(text)
    try:
        try:
            node = ld.get_single_node()
        except RecursionError:
            raise refusal("json_depth", f"the nesting of {what}", "too many levels") from None
        if node is None:
            return None
        size, depth = _expanded_nodes(node, what)
        if depth > limit("json_depth"):
            raise refusal("json_depth", f"the nesting of {what}", f"{depth:,} levels")
        if size > limit("yaml_nodes"):
            raise refusal("yaml_nodes", f"{what} with its aliases expanded", f"{size:,} nodes")
        try:
            return ld.construct_document(node)
        except RecursionError:
            raise refusal("json_depth", f"the nesting of {what}", "too many levels") from None
    finally:
        ld.dispose()
