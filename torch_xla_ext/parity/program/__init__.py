"""The XLA run's program and its replays: the program as StableHLO with its rounding points
(:mod:`.stablehlo`), a device's precision rules for its matmuls (:mod:`.rules`), the rewrites that
make a replay of it (:mod:`.rewrite`), its cut at repeated blocks (:mod:`.segments`) and the
compiled replay (:mod:`.replay`)."""
