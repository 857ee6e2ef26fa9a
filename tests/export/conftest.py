"""Process-wide settings for tests/export (pytest loads this before any test module).

multi_replica_test's JAX-native reference (psum under shard_map) runs on JAX's default backend
and needs 2 of its CPU devices, a setting JAX reads once, before its first use. export.run
itself needs no setting: it runs on a PJRT CPU client of its own (see tests/export/no_torch_test.py,
which checks that in a fresh process)."""

import jax

jax.config.update("jax_num_cpu_devices", 2)
