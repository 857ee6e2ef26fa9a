"""The stages of a parity run, one module each, in the order a run goes through them: CPU eager
(:mod:`.cpu_eager`), the fp64 golden (:mod:`.golden`), the XLA run (:mod:`.xla_run`), the replays
of its program (:mod:`.replays`), the per-module localisation (:mod:`.localization`) and the
explanation that makes the report (:mod:`.explanation`). Each reads and writes the one run record
(:mod:`..record`); the runner (:mod:`..pipeline`) runs them."""
