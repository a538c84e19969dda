"""JAX: a jitted matrix product and reduction; prints the result (its bits:
XLA's reductions are made deterministic, which they are not by default)."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
import jax
import jax.numpy as jnp

x = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) / 1000
f = jax.jit(lambda a: (a @ a + jnp.sin(a)).sum())
print("jax", jax.default_backend(), float(f(x)).hex())
