"""The pipelined wafer engine: `perf` (the plan priced), `plan` (the plan on the emulation
wafer), `schedule` (pure device functions over `PipeState`), `engine` (`PipelineEngine`)."""
