"""A trained ListOps run's attention weights for one expression, drawn layer by layer and head by head."""
import jax.numpy as jnp
import numpy as np

from lra_posenc.data import listops as generator
from lra_posenc.plots import plot_attention_maps
from lra_posenc.listops import input_pipeline, settings
from lra_posenc.models.transformer import with_xla_attention
from lra_posenc.training.checkpointing import restore_best


def attention_maps(workdir: str, expression: str, path: str) -> dict:
  """Plots every layer's and head's attention weights of the run's best checkpoint for `expression` into `path`;
  returns the expression, its true label, the prediction and the number of layers and heads."""
  config, params, step = restore_best(workdir, settings.CONFIG_HISTORY)
  tokens = input_pipeline.tokenize(expression)
  unknown = [t for t in tokens if t not in input_pipeline.TOKEN_IDS]
  if not tokens or unknown:
    raise ValueError(f'--expression: {unknown or "no tokens"}; ListOps tokens are {input_pipeline.VOCAB[1:]}')
  ids = jnp.asarray([[input_pipeline.TOKEN_IDS[t] for t in tokens]], jnp.int32)
  run = settings.read_scoring_settings(config)
  model = with_xla_attention(run.model)  # Weights to draw, on any backend, whatever path the run trained on.
  logits, state = model.apply({'params': params}, ids, train=False, mutable=['intermediates'])
  encoder = state['intermediates']['encoder']
  layers = [np.asarray(encoder[f'block_{i}']['MultiHeadAttention_0']['attention_weights'][0])[0]
            for i in range(model.config.num_layers)]
  prediction = int(np.argmax(logits[0]))
  label = generator.evaluate_tokens(tokens) % run.data.generator['label_modulus']
  plot_attention_maps(layers, (['[CLS]'] if model.pooling == 'cls' else []) + tokens,
                      f'{model.config.pos_encoding}, best step {step}: {expression}\ntrue label {label}, predicted '
                      f'{prediction}', path)
  return {'expression': expression, 'label': label, 'prediction': prediction, 'layers': len(layers),
          'heads': layers[0].shape[0]}
