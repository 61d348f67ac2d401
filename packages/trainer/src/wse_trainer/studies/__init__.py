"""The trainer's experiments beyond weight streaming (`wse experiments run NAME`):
`sparsity_speedup` (ReLU activation sparsity and zero-skipping) and `varlen_packing`
(documents packed without padding)."""
