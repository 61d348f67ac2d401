"""The performance model: work by mechanism, its pricing, every constant with its source, the one
calibration, assumptions, collectives and the RunReport."""
