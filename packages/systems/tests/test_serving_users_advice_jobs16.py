"""Hunt jobs16 H5 (session 80): the refusal of too many users on a wafer replica advised "use
more wafers" alone, which leads to a replica of more wafers serving them worse than replicas
of the wafers asked (Llama 3 8B, 200 users on CS-3: one 2-wafer replica 26.1k tokens/s, two
1-wafer replicas of 100 users 39.7k). Now it names the replicas first: how many, with how
many users each, and how `--tokens-per-day` sets them.

Oracle: the plan prices both alternatives for the same wafers: the replicas the message
names (each its users' point, times the replicas) against one replica of that many wafers
holding every user; and the count it names is ceil(users / max users), by hand.
"""

from __future__ import annotations

import math
import re

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.planning.infer import wafer_serving
from wse_systems.planning.infer_inputs import default_workload
from wse_systems.serving import ServingError

pytestmark = pytest.mark.timeout(300)


def test_the_refusal_names_replicas_that_serve_faster_than_more_wafers():
    cfg, spec, users = preset_config("llama3-8b"), preset("wse3"), 200
    work = default_workload(cfg)
    one = wafer_serving(cfg, spec, num_wafers=1, workload=work)
    with pytest.raises(ServingError) as err:
        one.point(users)
    text = str(err.value)
    named = re.search(r"serve them as (\d+) replicas of 1 x \S+, (\d+) users each at most "
                      r"\(wse plan infer --users (\d+); --tokens-per-day sets", text)  # fmt: skip
    assert named, text
    replicas, each, flag = map(int, named.groups())
    assert replicas == math.ceil(users / one.max_users) == 2 and each == flag
    assert replicas * each >= users and each <= one.max_users
    assert text.index("replicas") < text.index("more wafers")  # the replicas first
    pooled = wafer_serving(cfg, spec, num_wafers=replicas, workload=work).point(users)
    split = one.point(each)
    assert replicas * split.aggregate_tokens_per_s > 1.2 * pooled.aggregate_tokens_per_s
    assert split.user_tokens_per_s > pooled.user_tokens_per_s
