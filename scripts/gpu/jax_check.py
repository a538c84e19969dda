"""JAX: a jitted matrix product and reduction; prints the result."""
import jax
import jax.numpy as jnp

x = jnp.arange(256 * 256, dtype=jnp.float32).reshape(256, 256) / 1000
f = jax.jit(lambda a: (a @ a + jnp.sin(a)).sum())
print("jax", jax.default_backend(), float(f(x)).hex())
