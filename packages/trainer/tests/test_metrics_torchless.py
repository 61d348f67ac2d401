"""The TensorBoard events of a run are written without importing torch (stop 69: tensorboardX
imported torch at its top only to accept torch tensors, 1.5 s of every `wse train` process,
8.6 s under load). Oracle: the event file's records parsed by hand (TFRecord framing, the
Event protobuf tensorboardX ships) hold the scalars recorded, and `sys.modules` of the
writing process holds no torch."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

SCRIPT = """
import json, sys
from wse_trainer.metrics import MetricsLog
log = MetricsLog(sys.argv[1])
log.record(3, "train", {"loss": 1.25, "lr": 0.5})
log.close()
print(json.dumps({"torch": "torch" in sys.modules}))
"""


def _scalars(path) -> dict[str, float]:
    from tensorboardX.proto.event_pb2 import Event

    data, out, at = path.read_bytes(), {}, 0
    while at < len(data):  # TFRecord: length, its crc, the record, its crc
        (n,) = struct.unpack("<Q", data[at : at + 8])
        event = Event.FromString(data[at + 12 : at + 12 + n])
        at += 12 + n + 4
        out |= {v.tag: v.simple_value for v in event.summary.value if event.step == 3}
    return out


def test_a_run_writes_its_scalars_without_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    # no torch, and no None left in its place (a later `import torch` would fail)
    assert json.loads(done.stdout.splitlines()[-1]) == {"torch": False}
    (events,) = (tmp_path / "train").glob("events.out.tfevents*")
    got = _scalars(events)
    assert got == {"loss": 1.25, "lr": 0.5}, got
