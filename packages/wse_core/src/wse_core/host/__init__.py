"""The machine the emulator runs on: JAX devices and caches, multi-process runs, and host memory
checked before allocating."""
