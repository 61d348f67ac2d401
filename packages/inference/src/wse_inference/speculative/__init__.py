"""Speculative decoding: `verify` (exact rejection sampling, acceptance statistics),
`decoder` (draft proposes, target verifies, one jitted loop), `engine` (`SpeculativeEngine`,
the server's slots over the decoder's round)."""
