"""Whether this jaxlib's oneDNN options change a compiled product: the custom calls and fusion kinds of a jitted
gelu(x @ w) at the LM `:cpu` MLP's shape under each XLA_FLAGS value, one process each:

    for f in '' --xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot \
        --xla_cpu_experimental_onednn_custom_call=true; do XLA_FLAGS="$f" python onednn_flags.py; done
"""
import os, re
import jax, jax.numpy as jnp
compiled = jax.jit(lambda a, b: jax.nn.gelu(a @ b)).lower(jnp.ones((768, 128)), jnp.ones((128, 512))).compile()
text = compiled.as_text()
print(repr(os.environ.get('XLA_FLAGS', '')), 'fusion kinds:', sorted(set(re.findall(r'"kind":"(__\w+)"', text))),
      'custom calls:', sorted(set(re.findall(r'custom_call_target="([^"]+)"', text))),
      'a oneDNN fusion or call:', '__onednn' in text)
