"""The bounded readers every file of the stack goes through (limits from `wse_core.host.limits`).

Contract. Each refuses an input past its limit before the work it would cost, with the
`LimitError` of `wse_core.host.limits` (one line naming the value, the limit and its override):
- `not_regular(path)`: why `path` is no regular file ("is a FIFO, not a regular file"; a
  folder, socket, device or broken link likewise), None for one: the one wording of that
  check, from stat alone (a FIFO's open waits for a writer), each caller's error around it;
- `read_text(path, what)`: a regular file's text, at most `file_bytes` (`/dev/zero` and a
  FIFO are refused before a byte is read; a file growing while read is cut at the limit);
- `load_json(text, what)`: JSON nested at most `json_depth` levels (counted on the text,
  without recursion, before the parser runs), each object's keys distinct (`json_keys`);
- `load_yaml(text, what, loader=...)`: YAML of at most `yaml_bytes` (refused before PyYAML,
  which parses ~1.2 MB/s) whose node count, every alias expanded, is at
  most `yaml_nodes` (counted on the composed graph, linear in its distinct nodes, before any
  Python object is built; a recursive alias is refused), nested at most `json_depth` levels
  (flow brackets counted on the text before PyYAML's scanner, which is quadratic in them),
  each mapping's keys distinct text (`names_loader`: a key twice or `1: 2` is refused);
- `open_npz(path, what)`: `np.load` (no pickles) of an .npz whose zip end record counts at
  most `npz_members` members, refused from that record alone before zipfile reads the
  directory (200,000 members took ~1.3 s to refuse after reading it, 0.4 s this way);
- `require_npz(z, what, fits=...)`: an open `np.load` archive of at most `npz_members`
  arrays, none over 64 MiB inflating past `npz_inflation` x its compressed size, whose array
  headers fit the host memory (`wse_core.host.memory.require`), before any array is read.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from wse_core.host.json_keys import distinct_keys
from wse_core.host.limits import LimitError, lift, limit, refusal
from wse_core.host.memory import HostMemoryError, format_bytes, require

__all__ = [
    "not_regular",
    "read_text",
    "packed_hint",
    "load_json",
    "load_yaml",
    "names_loader",
    "text_depth",
    "depth_run",
    "lines_run",
    "open_npz",
    "require_npz",
    "NPZ_INFLATE_FLOOR_BYTES",
]

# A member of an .npz larger than NPZ_INFLATE_FLOOR_BYTES may inflate at most the limit
# `npz_inflation` x its compressed size (hunt 57: a 2 MiB file inflating to 2 GiB of zeros
# was read whole). Deflate's best is ~1,032x (all zeros), a zip bomb's ratio; this stack's
# writers stay far below: np.savez stores operators and restarts (1x), and a trace's
# compressed layers hold at most wse_core.trace.MAX_CELLS values (1 MiB, under the floor).
# Arrays in one .npz are at most the limit `npz_members`: each header is opened and read
# before any data (200,000 one-value members took 30 s to refuse); this stack writes < 40
# (a trace's layers, an operator's 7). Both limits are in wse_core.host.limits.LIMITS.
NPZ_INFLATE_FLOOR_BYTES = 64 << 20


def read_text(path: str | Path, what: str) -> str:
    """A regular file's UTF-8 text, at most `file_bytes`; OSError / UnicodeDecodeError pass
    through for the caller to phrase, size and kind refusals are `LimitError`."""
    path = Path(path)
    cap = limit("file_bytes")
    _require_regular(path, f"{what} {str(path)!r}")
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # swapped for another kind since the check
            raise LimitError(f"{what} {str(path)!r} {_kind_words(st.st_mode)}")
        if st.st_size > cap:
            raise refusal("file_bytes", f"{what} {str(path)!r}", f"{st.st_size:,} bytes")
        raw = _read_at_most(f, cap + 1)  # a byte past the cap: a file growing while read
    if len(raw) > cap:
        raise refusal("file_bytes", f"{what} {str(path)!r}", f"over {cap:,} bytes")
    return raw.decode("utf-8")


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why `path` is no regular file, as the words after its name: "is a folder, not a
    regular file" (likewise "a FIFO", "a socket", "a device", and "a broken link": a link
    that cannot be followed, dangling or in a loop); None for a regular file (a link
    followed to one) and where nothing is there (each caller says that its own way). From
    stat alone, never an open: a FIFO's open waits for a writer (hunt 60)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        broken = e.errno == errno.ELOOP or os.path.islink(path)
        return "is a broken link, not a regular file" if broken else None
    return None if stat.S_ISREG(mode) else _kind_words(mode)


def _kind_words(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))  # fmt: skip
    kind = next((k for test, k in kinds if test(mode)), "a special file")
    return f"is {kind}, not a regular file"


_PACKED = {  # the magic bytes of compressed files a user may give for a text file
    b"\x1f\x8b": "gzip-compressed: unpack it with gunzip",
    b"BZh": "bzip2-compressed: unpack it with bunzip2",
    b"\xfd7zXZ\x00": "xz-compressed: unpack it with unxz",
    b"\x28\xb5\x2f\xfd": "zstd-compressed: unpack it with unzstd",
    b"PK\x03\x04": "a zip archive: unpack it with unzip",
}


def packed_hint(head: bytes) -> str:
    """' (it is gzip-compressed: unpack it with gunzip first)' when `head` (a file's first
    bytes) opens a compressed file or archive, else '' (hunt 61: LAMMPS reads .gz potentials;
    wse said only "not a text file")."""
    for magic, what in _PACKED.items():
        if head.startswith(magic):
            return f" (it is {what} first)"
    return ""


def _require_regular(path: Path, named: str) -> None:
    """LimitError ("`named` is a folder, not a regular file") unless `path` is a regular
    file, checked before it is opened: a FIFO's open blocks until a writer comes (hunt 60:
    `wse hpc cfd --restart` and `wse hpc tlrmvm run --operator` hung on one). Nothing
    there: the open's OSError, for the caller to phrase."""
    if why := not_regular(path):
        raise LimitError(f"{named} {why}")


def _read_at_most(f: Any, n: int, chunk: int = 1 << 24) -> bytes:
    """Up to `n` bytes of `f` (`f.read(n)` allocates n bytes: hunt 58's MemoryError at 1e12)."""
    parts, got = [], 0
    while got < n and (part := f.read(min(n - got, chunk))):
        parts.append(part)
        got += len(part)
    return b"".join(parts)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
# a value string, or a key (a string a colon follows) captured: re.split keeps the keys
_JSON_KEY_SPLIT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"(?!\s*:)|"([^"\\]*(?:\\.[^"\\]*)*)"(?=\s*:)')


def text_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text (outside strings), without parsing it:
    strings removed by one regular expression, then a running sum over the brackets."""
    return depth_run(text)[0]


def depth_run(text: str, start: int = 0) -> tuple[int, int]:
    """(deepest, last) nesting of [ and { in JSON text outside strings, counted from `start`:
    a file read in pieces of whole lines carries `last` into the next (a JSON string holds
    no raw newline, so none is cut)."""
    _, run = _nesting(text, start)
    return int(run.max(initial=start)), int(run[-1]) if len(run) else start


def lines_run(
    text: str, start: int = 0, carry: int = 0, keys: set[str] | None = None
) -> tuple[int, int, int, int, int]:
    """`depth_run` of JSON lines, with their width: (deepest, last, most, line, open), where
    most is the most top-level fields of one record (colons outside strings at nesting 1, by
    line), line the 0-based line that has them, and open the fields of the last line when
    `text` ends inside it (pass it as `carry` with the rest of that line). One pass; given
    `keys`, the field names met at any depth (a string before a colon, as written) join it."""
    import numpy as np

    codes, run = _nesting(text, start, keys)
    ends = codes == ord("\n")
    lines = np.cumsum(ends) - ends  # a newline belongs to the line it ends
    count = int(lines[-1]) + 1 if len(lines) else 1
    per_line = np.bincount(lines[(codes == ord(":")) & (run == 1)], minlength=count)
    per_line[0] += carry
    line = int(per_line.argmax())
    still = 0 if len(codes) and ends[-1] else int(per_line[-1])
    deepest, last = int(run.max(initial=start)), int(run[-1]) if len(run) else start
    return deepest, last, int(per_line[line]), line, still


def _nesting(text: str, start: int, keys: set[str] | None = None):
    """(the text's bytes outside strings, the nesting after each of them from `start`); the
    strings that are keys join `keys` when it is given (the same pass of the regex)."""
    import numpy as np

    if keys is None:
        kept = _JSON_STRING.sub("", text)
    else:  # split: [outside, key or None, outside, ...]
        parts = _JSON_KEY_SPLIT.split(text)
        kept = "".join(parts[0::2])
        keys.update(parts[1::2])  # a value string's group is None
        keys.discard(None)  # type: ignore[arg-type]
    # surrogatepass: text from argv with bytes that are not UTF-8 (hunt 60: a traceback here)
    codes = np.frombuffer(kept.encode("utf-8", "surrogatepass"), np.uint8)
    step = np.isin(codes, _OPEN).astype(np.int64) - np.isin(codes, _CLOSE)
    return codes, start + np.cumsum(step)


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
    or not a field name) are a `yaml.constructor.ConstructorError` at the key's line.

    Merge keys (`<<: *base`) work as in `yaml.safe_load` (hunt 62: they were refused, as
    the merge tag has no constructor of its own): a mapping's own keys override merged ones,
    so only its own keys must be distinct. A merge is counted toward `yaml_nodes` as any
    alias is (`load_yaml` counts the composed graph before anything is built)."""
    if not _NAMES_LOADER:
        import yaml

        class NamesLoader(yaml.SafeLoader):
            def flatten_mapping(self, node: Any) -> None:
                # each mapping's own keys, counted before a merge puts others before them
                own = sum(k.tag != "tag:yaml.org,2002:merge" for k, _ in node.value)
                self.__dict__.setdefault("_own_keys", {}).setdefault(id(node), own)
                super().flatten_mapping(node)

            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                if not isinstance(node, yaml.MappingNode):  # `!!map text`: PyYAML's error
                    return super().construct_mapping(node, deep=deep)
                self.flatten_mapping(node)  # merged pairs first, then the mapping's own
                merged = len(node.value) - self.__dict__["_own_keys"][id(node)]
                seen: set[str] = set()
                for index, (key_node, _) in enumerate(node.value):
                    key = self.construct_object(key_node, deep=deep)
                    line = key_node.start_mark.line + 1
                    if not isinstance(key_node, yaml.ScalarNode):
                        why = f"the key at line {line} is a {key_node.id}; keys are names"
                    elif not isinstance(key, str):
                        why = f"key {key!r:.40} at line {line} is not a name; keys are text"
                    elif index < merged:  # a merged key: the mapping's own one overrides it
                        continue
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


def _too_many_members(what: str, members: int) -> HostMemoryError:
    return HostMemoryError(
        f"{what}: the archive holds {members:,} members; an .npz read here holds at most "
        f"{limit('npz_members'):,} arrays ({lift('npz_members')})"
    )


def open_npz(
    path: str | Path, what: str, *, mmap_mode: Literal["r+", "r", "w+", "c"] | None = None
) -> Any:
    """`np.load(path, allow_pickle=False, mmap_mode=...)` after refusing an archive of more
    than `npz_members` members from the zip's end record (zip64's included): a few bytes at
    the end, read before zipfile builds an entry for every member of the directory. A file
    with no end record (a foreign file) is left to `np.load`; a single array (.npy) is a
    ValueError for the caller to phrase, as NumPy's own errors are."""
    import zipfile

    import numpy as np

    stdlib: Any = zipfile  # its reader of that record is private (3.11 to 3.13 alike)
    _require_regular(Path(path), "it")  # each caller says "cannot read <what>: it is ..."
    with open(path, "rb") as f:
        end = stdlib._EndRecData(f)
    if end is not None and end[stdlib._ECD_ENTRIES_TOTAL] > limit("npz_members"):
        raise _too_many_members(what, end[stdlib._ECD_ENTRIES_TOTAL])
    z = np.load(path, allow_pickle=False, mmap_mode=mmap_mode)
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError("it is a single array (.npy), not an .npz archive")
    return z


def require_npz(z: Any, what: str, *, fits: Callable[[int], str], extra_per_value: int = 0) -> None:
    """`require` for an open `np.load` archive `z` from its members' array headers alone,
    before any array is read: a forged header claiming 10^12 values is refused here (NumPy
    would allocate it, then read), and so is a member that inflates beyond the limit
    `npz_inflation` (a zip bomb), from the zip directory's sizes. `extra_per_value`: bytes the
    caller adds per value (a float64 copy). A member that is not an array raises NumPy's error
    for the caller."""
    import math

    import numpy as np

    members = z.zip.infolist()
    if len(members) > limit("npz_members"):  # a caller that opened it without `open_npz`
        raise _too_many_members(what, len(members))
    max_ratio = limit("npz_inflation")
    for info in members:  # the zip directory's sizes, before inflating anything
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > NPZ_INFLATE_FLOOR_BYTES and ratio > max_ratio:
            raise HostMemoryError(
                f"{what}: member {info.filename!r:.80} inflates to {format_bytes(info.file_size)}"
                f" from {format_bytes(info.compress_size)} ({ratio:,.0f}x, a zip bomb?); a "
                f"member over {format_bytes(NPZ_INFLATE_FLOOR_BYTES)} may inflate at most "
                f"{max_ratio}x (np.savez writes arrays uncompressed; {lift('npz_inflation')})"
            )
    need = 0
    for name in z.zip.namelist():
        with z.zip.open(name) as f:
            major, _ = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if major == 1 else None
            shape, _, dtype = (read or np.lib.format.read_array_header_2_0)(f)
        need += math.prod(shape) * (dtype.itemsize + extra_per_value)
    require(f"{what} (its array headers)", need, fits=fits)
