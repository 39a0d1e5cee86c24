"""Translates sentences with the best checkpoint of a translation workdir, or the average of its last ones.

    python -m lra_posenc.translation.translate --workdir=runs/multi30k_cpu "A dog runs." "Two men talk."
    python -m lra_posenc.translation.translate --workdir=runs/multi30k_tiny --checkpoint=averaged < in.en > out.de

The workdir's config.json, tokenizer and checkpoint define the model, so the output matches the
translations written at the end of training (WORKDIR/translations, and translations/averaged for
--checkpoint=averaged; same search settings unless --beam_size or --length_penalty override them).
"""
import sys
from collections.abc import Sequence
from typing import NamedTuple

from absl import flags

from lra_posenc.training import cli
from lra_posenc.training.checkpointing import read_config, restore_best, restore_evaluated
from lra_posenc.training.run_files import quiet_checkpoint_logs
from lra_posenc.training.task import Params
from lra_posenc.training.trainer import average_parameters
from lra_posenc.translation import input_pipeline
from lra_posenc.translation.settings import CONFIG_HISTORY, DataSettings, read_translator_settings
from lra_posenc.translation.translator import Translator, build_translator

# The parameters a trained workdir can translate with: the best validation checkpoint, or the mean of the
# parameters of its last evaluations (`evaluation.average_last`), as training scored both.
CHECKPOINTS = ('best', 'averaged')


def checkpoint_params(workdir: str, checkpoint: str) -> tuple[Params, list[int]]:
  """The parameters `checkpoint` (one of CHECKPOINTS) names and the training steps they come from."""
  if checkpoint == 'best':
    _, params, step = restore_best(workdir, CONFIG_HISTORY)
    return params, [step]
  steps, params = restore_evaluated(workdir)
  return average_parameters(params), steps


class TrainedTranslator(NamedTuple):
  """A workdir's translator as it trained it, the parameters of one of its CHECKPOINTS and their steps, and the
  data settings it trained with."""
  translator: Translator
  params: Params
  steps: list[int]
  data: DataSettings


def load_translator(workdir: str, checkpoint: str = 'best', *, reads_text: bool = False) -> TrainedTranslator:
  """The workdir's translator and `checkpoint`'s parameters; with `reads_text` (a caller that reads the run's
  text) its data settings are checked as for training."""
  translation = read_translator_settings(read_config(workdir, CONFIG_HISTORY), reads_text=reads_text)
  params, steps = checkpoint_params(workdir, checkpoint)
  tokenizer = translation.data.tokenizer
  tokenizers = input_pipeline.workdir_tokenizers(workdir, joint=tokenizer.joint, lowercase=tokenizer.lowercase)
  return TrainedTranslator(build_translator(translation, tokenizers), params, steps, translation.data)


def translate_sentences(workdir: str, sentences: Sequence[str], *, checkpoint: str = 'best',
                        beam_size: int | None = None, length_penalty: float | None = None) -> list[str]:
  trained = load_translator(workdir, checkpoint)
  translator = trained.translator.with_search(beam_size=beam_size, length_penalty=length_penalty)
  return translator.translate(trained.params, sentences)


def main(argv: Sequence[str]) -> None:
  quiet_checkpoint_logs()
  sentences = argv[1:] or [line.rstrip('\n') for line in sys.stdin]
  for translation in translate_sentences(flags.FLAGS.workdir, sentences, checkpoint=flags.FLAGS.checkpoint,
                                         beam_size=flags.FLAGS.beam_size, length_penalty=flags.FLAGS.length_penalty):
    print(translation)


if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'A workdir written by lra_posenc.translation.train.')
  flags.DEFINE_enum('checkpoint', 'best', CHECKPOINTS, 'best: the best validation checkpoint; averaged: the mean '
                    'of the parameters of the last evaluations (evaluation.average_last), as results.json reports.')
  flags.DEFINE_integer('beam_size', None, 'Overrides decoding.beam_size (1: greedy).')
  flags.DEFINE_float('length_penalty', None, 'Overrides decoding.length_penalty.')
  flags.mark_flag_as_required('workdir')
  cli.run(main)
