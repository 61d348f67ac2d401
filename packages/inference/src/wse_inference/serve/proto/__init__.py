"""The gRPC protocol of the inference server: `generation.proto` and its generated stubs.

`load_stubs()` returns the modules `(generation_pb2, generation_pb2_grpc)`. The stubs are not
in git. A wheel ships them (the root `setup.py` generates them at build time with `_generate`),
and an installed package's stubs are used as they are. In a source checkout (editable
installs) they are generated with `grpc_tools.protoc` on first use (about 0.05 s) next to the
.proto, or regenerated when the .proto is newer. protoc runs with `-I` at the `src` root, so
the generated `_pb2_grpc` imports `wse_inference.serve.proto.generation_pb2` (a package path, not a
top-level module). If the package folder is read-only (an installed wheel), the stubs go to
`$WSE_CACHE_DIR/proto` (default `~/.cache/wse/proto`), which is added to this package's
`__path__`. Files are written to a temporary folder and renamed into place, so concurrent
processes never import a half-written stub.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["load_stubs", "PROTO_PATH"]

PROTO_PATH = Path(__file__).with_name("generation.proto")
_STUBS = ("generation_pb2.py", "generation_pb2_grpc.py")


def _fresh(folder: Path) -> bool:
    if not all((folder / f).is_file() for f in _STUBS):
        return False
    if not (PROTO_PATH.parents[4] / "pyproject.toml").is_file():
        return True  # installed from a wheel: its stubs were built from its own .proto
    mtime = PROTO_PATH.stat().st_mtime  # a checkout, where the .proto may have been edited
    return all((folder / f).stat().st_mtime >= mtime for f in _STUBS)


def _generate(folder: Path) -> None:
    from grpc_tools import protoc

    src_root = PROTO_PATH.parents[3]  # .../src, holding wse_inference/serve/proto/generation.proto
    well_known = Path(protoc.__file__).with_name("_proto")
    rel = PROTO_PATH.relative_to(src_root)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{src_root}",
                f"-I{well_known}",
                f"--python_out={tmp}",
                f"--grpc_python_out={tmp}",
                str(rel),
            ]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed on {PROTO_PATH} (exit {rc})")
        for f in _STUBS:
            os.replace(Path(tmp) / rel.parent / f, folder / f)


def _stub_folder() -> Path:
    here = PROTO_PATH.parent
    if _fresh(here):
        return here
    try:
        _generate(here)
        return here
    except OSError:
        cache = Path(os.environ.get("WSE_CACHE_DIR", Path.home() / ".cache" / "wse")) / "proto"
        if not _fresh(cache):
            _generate(cache)
        if str(cache) not in __path__:
            __path__.append(str(cache))
        return cache


def load_stubs() -> tuple[ModuleType, ModuleType]:
    """(generation_pb2, generation_pb2_grpc), generated first if missing or stale."""
    _stub_folder()
    pb2 = importlib.import_module(f"{__name__}.generation_pb2")
    pb2_grpc = importlib.import_module(f"{__name__}.generation_pb2_grpc")
    return pb2, pb2_grpc
