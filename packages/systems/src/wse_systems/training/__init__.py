"""The predicted training step: the SRAM plan, the placement of a layer, its work, the weight and
gradient streams, where they stall, and N systems."""
