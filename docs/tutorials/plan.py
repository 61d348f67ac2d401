# %% [markdown]
# # `wse plan`: wafers or GPUs
#
# A jupytext script (`# %%` cells) that the site build executes (`docs/hooks.py`); it takes a
# few seconds at any size. `wse plan infer` and `wse plan train` are these two calls: each
# prices a workload on CS-3 wafers and on H100 GPUs with the same calibrated cost model and
# says how many GPUs it takes to match. The numbers are predictions; the
# [cost model](../cost-model.md) page says what each rests on.

# %%
from wse_cli.commands.plan_print import count, duration
from wse_cli.model_choice import resolve_model
from wse_core.cost.assumptions import assumed_spec
from wse_systems.planning.infer import GpuSetup, WaferSetup, plan_infer
from wse_systems.planning.train import plan_train

wse3 = assumed_spec("wse3")
inf = plan_infer(resolve_model("llama3-8b"), wafer=WaferSetup(wse3, 1), gpu=GpuSetup(gpus=8))
w, g = inf.wafer.figures, inf.gpu.figures
for side, f in (("1 x CS-3", w), ("8 x H100", g)):
    print(
        f"{side}: {f['users']:,} users at {f['tokens_per_s_per_user']:,.0f} tokens/s each, "
        f"{f['tokens_per_s']:,.0f} tokens/s in all, {f['usd_per_million_tokens']:.3g} $/Mtok"
    )
# "none": no GPU count the planner tries reaches the wafer's tokens/s per user
print(f"GPUs to match the wafer's per-user speed: {count(inf.gpus_to_match['user_speed'])}")

# %% [markdown]
# Each side's serving frontier: aggregate tokens/s against tokens/s per user as the number
# of concurrent users grows. Every point on it is priced; the plan picks the knee. A frontier
# draws itself in a notebook (chart and table).

# %%
best = max(inf.wafer_frontier.points, key=lambda p: p.aggregate_tokens_per_s)
assert best.aggregate_tokens_per_s == inf.wafer_frontier.best_aggregate()
pareto = inf.wafer_frontier.pareto()
assert all(a.users < b.users for a, b in zip(pareto, pareto[1:], strict=False))
inf.wafer_frontier

# %% [markdown]
# Training: Llama-3 8B on 1e11 tokens, the time and energy on each side.

# %%
tr = plan_train(resolve_model("llama3_8b"), tokens=1e11, spec=wse3)
for side, p in (("CS-3", tr.wafer), ("H100", tr.gpu)):
    print(f"{p.units} x {side}: {duration(p.time_s)}, {p.energy_j / 3.6e9:.3g} MWh")
assert tr.wafer.time_s > 0 and tr.gpu.time_s > 0
