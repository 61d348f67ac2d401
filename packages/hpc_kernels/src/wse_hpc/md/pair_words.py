"""The pair word of the MD pair kernels: `density_half`'s `cut` packs each pair's place in
the window region (bits 0-23) and the candidate's species (bits 24-30) in one int32, so the
force pass reads one word per pair. Shared by `pe_pairs` (the JAX side, which checks the
sizes fit) and `pe_pairs_numba` (the kernels), neither importing the other for it. And
the list build's bit mask of a row offset's window columns (`pe_build_numba.build_pairs`,
one uint64), which `neighbours.build` picks it by."""

SPECIES_SHIFT = 24
PLACE_MASK = (1 << SPECIES_SHIFT) - 1
PAIR_MASK_COLS = 64  # window columns one row offset's mask holds (a uint64)
