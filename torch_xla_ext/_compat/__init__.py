"""The only modules that touch torch's, torch_xla's and JAX's private APIs, one per upstream
subsystem (torch_xla's exporter, collectives, HLO dump, metrics, Dynamo bridge; torch's pytree and
Python dispatch; JAX's MLIR, export and tracing internals), so an upgrade changes one file per
subsystem. Nothing else in the package uses a private upstream name
(//tests/layers:boundaries_test checks)."""
