"""The wafer as the emulator holds it: the spec and its dtype and SIMD tables, defects and their
repair, the SRAM and traffic ledgers, and the PE grid on a jax Mesh."""
