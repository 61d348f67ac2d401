"""wse_trainer: weight-streaming data-parallel training (MemoryX, SwarmX, wafer replicas).

Contract (see the trainer issue): MemoryX holds fp32 master weights and optax state and
applies each layer's update as its gradient arrives; SwarmX broadcasts each layer's weights to
`num_csx` wafer replicas and sum-reduces their gradients (bytes counted); replicas compute one
layer at a time with the next layer's weights prefetched. `wse train params.yaml` follows
Cerebras ModelZoo conventions.
"""
