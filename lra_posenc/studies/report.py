"""The results summary at the top of RESULTS.md, rebuilt from the committed run files under results/ so that it
cannot drift from them: per task and setting, each encoding's seeds, mean ± std, rank, how its runs ended, and its
difference from the reference encoding with a Welch p over seeds (and, where runs recorded their sentence
statistics, a paired bootstrap p over test sentences); a few verdict lines and one figure.

    python -m lra_posenc.studies.report [--results_dir=results] [--results_md=RESULTS.md] [--no-update_results_md]

writes RESULTS_DIR/SUMMARY.md, RESULTS_DIR/summary.png and the folder index RESULTS_DIR/README.md, replaces
the block between SUMMARY_START and SUMMARY_END in RESULTS.md (inserted after its first paragraph if it has none),
and the verdict lines between VERDICTS_START and VERDICTS_END in README.md.
"""
import argparse
import collections
import json
import os
import re
import textwrap
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import scipy.stats

from lra_posenc import run_folders, tasks
from lra_posenc.data.files import read_csv_figures, written_whole
from lra_posenc.studies import length_generalisation, sweep
from lra_posenc.studies.study_files import STUDY_FILE, SummaryTable, read_tables
from lra_posenc.training.run_files import RESULTS_FILE, read_json


class ScoredTable(NamedTuple):
  """A table as the summary shows it: its declaration, its rows (`table_rows`), and the finished runs left out for
  want of a score in its metric, as encoding -> seeds."""
  table: SummaryTable
  rows: list[dict]
  unscored: dict[str, list[int]]

SUMMARY_START = '<!-- summary:start -->'
SUMMARY_END = '<!-- summary:end -->'
# README.md's results bullets: the verdict lines, between these markers (which README.md must have).
VERDICTS_START = '<!-- verdicts:start -->'
VERDICTS_END = '<!-- verdicts:end -->'
WHICH_START = '<!-- which:start -->'  # README.md's "Which encoding should I use?" lines.
WHICH_END = '<!-- which:end -->'
RANKS_FILE = 'ranks.png'  # Encodings by table, coloured by rank; its numbers beside it as ranks.json.
SUMMARY_FILE = 'SUMMARY.md'
FIGURE_FILE = 'summary.png'
INDEX_FILE = 'README.md'  # results/README.md: every study folder, where RESULTS.md reads it, and its runs' provenance.
ENDINGS = {'patience': 'patience', 'num_train_steps': 'budget'}  # results.json's training_ended.reason, as read.
NOT_RECORDED = 'not recorded'  # A run read from a runs.csv, or one whose results.json predates training_ended.
SIGNIFICANCE = 0.05
# What read_source keeps of a run beside its figures: how it ended, where it is, and how it was trained.
RUN_RECORD = ('ended', 'run_dir', 'source', 'commit', 'precision')


def read_source(results_dir: str, source: str, task: tasks.TaskSpec) -> list[dict]:
  """The finished runs of one source: run_row's figures, each run's length scores as 'SET BUCKET' (and 'SET
  BUCKET majority'), and, apart from the figures (RUN_RECORD), its 'ended' reason, 'run_dir' (None from a
  runs.csv), and the 'commit' and matrix-product 'precision' its provenance records (None where it records none)."""
  path = os.path.join(results_dir, source)
  if source.endswith('.csv'):
    return [row | {'seed': int(row['seed']), 'ended': NOT_RECORDED, 'run_dir': None, 'commit': None, 'precision': None}
            for row in read_csv_figures(path, lambda column: column not in sweep.LABEL_COLUMNS)]
  runs = []
  for directory in sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))):
    seeds = sorted((run_folders.seed_of_run(os.path.join(path, directory, name)), os.path.join(path, directory, name))
                   for name in os.listdir(os.path.join(path, directory)) if name.startswith('seed_'))
    variant = run_folders.parse_variant(run_folders.spec_of_directory(directory)) if seeds else None
    for seed, run_dir in seeds:
      row = sweep.run_row(task, variant, seed, run_dir, task.default_target)
      if row is None:
        continue
      for length_set, buckets in length_generalisation.length_scores(run_dir).items():
        for bucket, scores in buckets.items():
          row[f'{length_set} {bucket}'] = scores['score']
          row[f'{length_set} {bucket} majority'] = scores.get('majority')
      results = read_json(os.path.join(run_dir, RESULTS_FILE))
      reason = results.get('training_ended', {}).get('reason')
      run_provenance = results.get('provenance') or {}
      runs.append(row | {'ended': ENDINGS.get(reason, reason or NOT_RECORDED), 'run_dir': run_dir,
                         'commit': (run_provenance.get('git_commit') or '')[:7] or None,
                         'precision': run_provenance.get('default_matmul_precision')})
  return runs


def table_rows(table: SummaryTable, results_dir: str) -> tuple[list[dict], dict[str, list[int]]]:
  """One row per encoding, best first: encoding, n, stats (column -> mean_and_std with values), rank,
  ended, delta and welch_p against the reference (None where not defined); with sentence statistics,
  recorded_seeds (the seeds that recorded them), bootstrap_p and bootstrap_seeds. Second, the finished runs
  left out for want of a score in the table's metric, as encoding -> seeds, for the table to name them."""
  task = tasks.find(table.task)
  if table.statistics and task.paired_test is None:
    raise ValueError(f"{table.title}: statistics {table.statistics} name a paired test, which task "
                     f"{table.task!r} does not have (TaskSpec.paired_test)")
  runs, unscored = [], {}
  for source in table.sources:
    for run in read_source(results_dir, source, task):
      if run.get(table.metric) is None:
        unscored.setdefault(run['variant'], []).append(run['seed'])
      else:
        runs.append(run | {'source': source})
  variants = [run_folders.parse_variant(spec) for spec in dict.fromkeys(run['variant'] for run in runs)]
  for variant in variants:
    sources = sorted({run['source'] for run in runs if run['variant'] == variant.spec})
    if len(sources) > 1:
      raise ValueError(f"{table.title}: {variant.spec} has runs in more than one source: {sources}")
  figures = [{key: value for key, value in run.items() if key not in RUN_RECORD} for run in runs]
  rows, pooled = [], {}
  for summary in sweep.variant_summaries(figures, variants):
    own = [run for run in runs if run['variant'] == summary['variant']]
    rows.append({'encoding': summary['variant'], 'n': len(own), 'runs': own,
                 'stats': summary['columns'], 'ended': ended_cell([run['ended'] for run in own])})
    if table.statistics:
      recorded = [(run['run_dir'], run['seed']) for run in own if run['run_dir'] is not None]
      pooled[summary['variant']] = task.paired_test.pool(recorded, *table.statistics)
      rows[-1]['recorded_seeds'] = pooled[summary['variant']].seeds if pooled[summary['variant']] else []
  if table.reference not in [row['encoding'] for row in rows]:
    raise ValueError(f"{table.title}: no runs of the reference encoding {table.reference}")
  better = 1 if table.lower_is_better else -1
  rows.sort(key=lambda row: (better * row['stats'][table.metric]['mean'], row['encoding']))
  reference = next(row for row in rows if row['encoding'] == table.reference)
  for rank, row in enumerate(rows, 1):
    row['rank'] = rank
    row |= _against_reference(table, row, reference)
    if table.statistics:
      row |= _bootstrap(task, row, pooled[row['encoding']], pooled[reference['encoding']])
  for test in ('welch', 'bootstrap'):  # Each test's family: the table's comparisons against its reference.
    for row, adjusted in zip(rows, holm([row.get(f'{test}_p') for row in rows])):
      row[f'{test}_holm_p'] = adjusted
  return rows, unscored


def holm(p_values: Sequence[float | None]) -> list[float | None]:
  """Holm's step-down adjustment of the p-values present (None: no test, left None): the i-th smallest of m
  becomes max over j <= i of min(1, (m - j + 1) p_(j)), so that rejecting where the adjusted p < alpha keeps the
  family-wise error rate at alpha."""
  present = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
  adjusted: list[float | None] = [None] * len(p_values)
  running = 0.0
  for rank, (p, index) in enumerate(present):
    running = max(running, min(1.0, (len(present) - rank) * p))
    adjusted[index] = running
  return adjusted


def ended_cell(reasons: Sequence[str]) -> str:
  """How the runs ended, counted: '2 patience, 1 budget' (patience, then budget, then other reasons)."""
  order = list(ENDINGS.values())
  counts = {reason: reasons.count(reason) for reason in sorted(set(reasons), key=lambda r: (
      order.index(r) if r in order else len(order), r))}
  return ', '.join(f'{count} {reason}' for reason, count in counts.items())


def _against_reference(table: SummaryTable, row: dict, reference: dict) -> dict:
  """The row's difference of means from the reference and the Welch p over seeds, or, where there is none, why
  (`welch_missing`: one seed on a side, or no spread over seeds on either); all None for the reference itself."""
  if row is reference:
    return {'delta': None, 'welch_p': None, 'welch_missing': None}
  metric = table.metric
  welch_p, missing = welch(row, reference, metric)
  return {'delta': row['stats'][metric]['mean'] - reference['stats'][metric]['mean'], 'welch_p': welch_p,
          'welch_missing': missing}


def welch(row: dict, other: dict, metric: str) -> tuple[float | None, str | None]:
  """Welch's two-sided p over the seeds of two rows, or None and why not: one seed on a side, or no spread over
  seeds on either."""
  values = [[v for v in side['stats'][metric]['values'] if v is not None] for side in (row, other)]
  if min(len(v) for v in values) < 2:
    return None, 'one seed'
  if all(np.ptp(v) == 0 for v in values):  # t = 0 / 0.
    return None, 'no spread over seeds'
  with warnings.catch_warnings():  # scipy's warning of "nearly identical" data, for a side whose spread is 0.
    warnings.filterwarnings('ignore', 'Precision loss occurred in moment calculation', RuntimeWarning)
    return float(scipy.stats.ttest_ind(values[0], values[1], equal_var=False).pvalue), None


def _bootstrap(task: tasks.TaskSpec, row: dict, pooled: Any, reference: Any) -> dict:
  """The task's paired test of the row's pooled examples against the reference's, with the row's seeds in it;
  None where either side recorded none, or for the reference itself."""
  if row['delta'] is None or pooled is None or reference is None:
    return {'bootstrap_p': None, 'bootstrap_seeds': []}
  return {'bootstrap_p': task.paired_test.p_value(reference, pooled, f"{row['encoding']} against the reference"),
          'bootstrap_seeds': pooled.seeds}


def summary_tables(results_dir: str, tables: Sequence[SummaryTable] | None = None) -> list[ScoredTable]:
  """Each table with its rows: `tables`, or by default every study file's under `results_dir`."""
  return [ScoredTable(table, *table_rows(table, results_dir))
          for table in (read_tables(results_dir) if tables is None else tables)]


def p_cell(p: float | None) -> str:
  """A p-value as the tables print it: three decimals, '< 0.001' below that, 'n/a' where no test ran; four
  decimals where three would round a p below 0.05 up to the threshold (0.0499, read "significant at 5%")."""
  if p is None:
    return 'n/a'
  if p < 0.0005:
    return '< 0.001'
  return f'{p:.4f}' if p < 0.05 <= round(p, 3) else f'{p:.3f}'


def significance(p: float | None) -> str:
  """How a p-value reads here: p < 0.05 is significant at 5%; anything else, a missing test included, is not
  established."""
  return 'significant at 5%' if p is not None and p < SIGNIFICANCE else 'not established'


def markdown_table(number: int, table: SummaryTable, rows: Sequence[dict], link_prefix: str,
                   unscored: dict[str, list[int]] | None = None) -> list[str]:
  """A heading naming the setting, metric and sources, then one row per encoding (no blank line between:
  the block must fit one screen). The bootstrap column appears where some run recorded sentence statistics; the
  heading names the runs table_rows left out `unscored`."""
  digits, reference = table.digits, table.reference
  heading = f"#### {number}. {table.title}: {table.setting}"
  if table.lower_is_better:
    heading += '; lower is better'
  if table.baseline:
    column, label = table.baseline
    heading += f"; {label} {rows[0]['stats'][column]['mean']:.{digits}f}"
  bootstrap = any(row.get('bootstrap_p') is not None for row in rows)
  if bootstrap:
    checkpoint, split, name = table.statistics
    reference_seeds = next(row['recorded_seeds'] for row in rows if row['encoding'] == reference)
    heading += f"; bootstrap on {split} {name}, {reference}'s seeds {_seed_list(reference_seeds)}"
  elif table.statistics:
    heading += f"; no run recorded {tasks.find(table.task).paired_test.records}, so no bootstrap"
  if unscored:
    heading += '; no score, so not in the table: ' + ', '.join(
        f"{encoding} seed{'s' if len(seeds) > 1 else ''} {_seed_list(seeds)}"
        for encoding, seeds in unscored.items())
  heading += ' (' + ', '.join(f'[{source}]({link_prefix}{source})' for source in table.sources) + ')'
  headers = (['encoding', 'n'] + [label for _, label in table.columns]
             + ['rank', 'ended', f'Δ vs {reference}', 'Welch p (Holm)']
             + (['bootstrap p (Holm; seeds)'] if bootstrap else []))
  lines = [heading, '| ' + ' | '.join(headers) + ' |', '| --- ' * len(headers) + '|']
  for row in rows:
    cells = [row['encoding'], str(row['n'])]
    cells += [run_folders.mean_std_cell(row['stats'][column], digits) for column, _ in table.columns]
    cells += [str(row['rank']), row['ended'],
              'reference' if row['delta'] is None else f"{row['delta']:+.{digits}f}",
              '-' if row['delta'] is None else _p_and_holm(row['welch_p'], row['welch_holm_p'])]
    if bootstrap:
      cells.append('-' if row['delta'] is None else 'n/a' if row['bootstrap_p'] is None else
                   f"{p_cell(row['bootstrap_p'])} ({p_cell(row['bootstrap_holm_p'])}; "
                   f"{_seed_list(row['bootstrap_seeds'])})")
    lines.append('| ' + ' | '.join(cells) + ' |')
  return lines


def _p_and_holm(p: float | None, adjusted: float | None) -> str:
  """'0.013 (0.052)': a p-value and its Holm-adjusted value; 'n/a' where no test ran."""
  return 'n/a' if p is None else f'{p_cell(p)} ({p_cell(adjusted)})'


def _seed_list(seeds: Sequence[int]) -> str:
  """'0, 1, 2'."""
  return ', '.join(str(seed) for seed in seeds)


def _versus(table: SummaryTable, row: dict) -> str:
  """A row's mean and its difference from the reference with the tests' p-values, Holm-adjusted within the table,
  and what the adjusted values establish."""
  digits = table.digits
  text = f"{run_folders.mean_std_cell(row['stats'][table.metric], digits)} (n={row['n']})"
  if row['delta'] is None:
    return text + ', the reference itself'
  text += f", {row['delta']:+.{digits}f} against {table.reference}, Welch p = {p_cell(row['welch_p'])}"
  if row['welch_p'] is None:
    text += f" ({row['welch_missing']})"
  else:
    text += f" (Holm {p_cell(row['welch_holm_p'])})"
  if row.get('bootstrap_p') is not None:
    text += f", paired bootstrap p = {p_cell(row['bootstrap_p'])} (Holm {p_cell(row['bootstrap_holm_p'])})"
  established = [test for test, p in (('Welch', row['welch_holm_p']), ('bootstrap', row.get('bootstrap_holm_p')))
                 if significance(p) != 'not established']
  return text + (f": significant at 5% ({' and '.join(established)})" if established else ': not established')


def verdicts(tables: Sequence[ScoredTable]) -> list[str]:
  """One line per table (its first row, whether it is separated from the second, the first over several seeds if
  that is another, and which other differences from the reference are significant over seeds after Holm's
  adjustment), and one with the ranks of the encodings every table has; each names the table it rests on."""
  lines = []
  for number, (table, rows, _) in enumerate(tables, 1):
    reference, leader = table.reference, rows[0]
    direction = ', lower is better' if table.lower_is_better else ''
    line = (f"- **{table.title}** (table {number}{direction}): {_first(table, rows)}, "
            f"{_versus(table, leader)}.")
    seeded = next((row for row in rows if row['n'] > 1), None)
    if leader['n'] < 2 and seeded:
      line += f" With more than one seed, {seeded['encoding']} is first, {_versus(table, seeded)}."
    named = {leader['encoding'], seeded['encoding'] if seeded else None}
    significant = [f"{row['encoding']} {row['delta']:+.{table.digits}f} (p = {p_cell(row['welch_p'])}, "
                   f"Holm {p_cell(row['welch_holm_p'])})"
                   for row in rows if row['encoding'] not in named and row['delta'] is not None
                   and significance(row['welch_holm_p']) != 'not established']
    line += (f" Also significant at 5% over seeds after Holm: {', '.join(significant)}." if significant
             else f' No other difference from {reference} is significant at 5% over seeds after Holm.')
    if table.rank_also_at:
      line += ' ' + rank_agreement(table, rows)
    if notes := caveats(rows):
      line += f" Caveats: {'; '.join(notes)}."
    lines.append(line)
  common = [row['encoding'] for row in tables[0][1]
            if all(any(other['encoding'] == row['encoding'] for other in rows) for _, rows, _ in tables)]
  ranked = {encoding: [next(row for row in rows if row['encoding'] == encoding) for _, rows, _ in tables]
            for encoding in common}
  if common:
    ordered = sorted(common, key=lambda encoding: (sum(row['rank'] for row in ranked[encoding]), encoding))
    ranks = {encoding: ', '.join(f"{row['rank']}{'*' if row['n'] < 2 else ''}" for row in ranked[encoding])
             for encoding in ordered}
    lines.append(f"- **In all {len(tables)} tables** (rank in tables 1-{len(tables)}, of "
                 f"{', '.join(str(len(rows)) for _, rows, _ in tables)} encodings; * one seed): "
                 + '; '.join(f'{encoding} {ranks[encoding]}' for encoding in ordered) + '.')
  return lines


def _better(table: SummaryTable, delta: float) -> bool:
  return delta < 0 if table.lower_is_better else delta > 0


def established(table: SummaryTable, row: dict) -> bool:
  """Whether the row's difference from the reference is significant at 5% over seeds after Holm's adjustment
  (Welch's, or the paired bootstrap's where the table has one)."""
  return row['delta'] is not None and any(significance(p) != 'not established'
                                          for p in (row['welch_holm_p'], row.get('bootstrap_holm_p')))


def which_encoding(tables: Sequence[ScoredTable]) -> list[str]:
  """README's answer, one line per question the tables answer (a table's 'question', in their order): which
  encodings the tables show better or worse than the reference (significant over seeds after Holm), whether the
  first one is separated from the second, and what is not established."""
  questions: dict[str, list[tuple[int, dict, list[dict]]]] = {}
  for number, (table, rows, _) in enumerate(tables, 1):
    questions.setdefault(table.question, []).append((number, table, rows))
  lines = []
  for question, answered in questions.items():
    better, worse, first, open_ = [], [], [], []
    for number, table, rows in answered:
      reference = table.reference
      for row in rows:
        if established(table, row):
          (better if _better(table, row['delta']) else worse).append(
              f"{row['encoding']} ({row['delta']:+.{table.digits}f} against {reference}, table {number})")
      leader = rows[0]['encoding']
      verb = 'leads' if leads(table, rows) else 'ranks first, not separated from'
      first.append(f"{leader} {verb} {rows[1]['encoding']} (table {number})" if len(rows) > 1
                   else f'{leader} (table {number}, alone)')
      untested = sum(1 for row in rows if row['encoding'] != reference and not established(table, row))
      open_.append(f'{untested} of {len(rows) - 1} differences from {reference} (table {number})')
    numbers = [str(number) for number, _, _ in answered]
    line = f"- **{question[0].upper() + question[1:]}** (table{'s' if len(numbers) > 1 else ''} {', '.join(numbers)}): "
    line += (f"better than the reference: {'; '.join(better)}. " if better
             else 'no encoding is established better than the reference. ')
    if worse:
      line += f"Worse: {'; '.join(worse)}. "
    line += f"First: {'; '.join(first)}. Not established: {'; '.join(open_)}."
    lines.append(line)
  return lines


def rank_figure(tables: Sequence[ScoredTable], path: str) -> dict:
  """Encodings (rows, by mean rank fraction over the tables that have them) by table (columns), each cell
  coloured by its rank within the table (1 = best) and marked where its difference from the reference is
  established (significant over seeds after Holm: '+' better, '-' worse; 'ref': the reference). Writes the figure
  to `path` and its numbers beside it (.json); returns them."""
  columns = [f"{number}. {table.title}".replace('`', '') for number, (table, _, _) in enumerate(tables, 1)]
  cells: dict[str, dict[str, dict]] = {}
  for column, (table, rows, _) in zip(columns, tables):
    for row in rows:
      mark = ('ref' if row['encoding'] == table.reference else
              ('+' if _better(table, row['delta']) else '-') if established(table, row) else '')
      cells.setdefault(row['encoding'], {})[column] = {'rank': row['rank'], 'of': len(rows), 'mark': mark}
  fraction = lambda cell: (cell['rank'] - 1) / max(cell['of'] - 1, 1)
  order = sorted(cells, key=lambda e: (np.mean([fraction(c) for c in cells[e].values()]), -len(cells[e]), e))
  grid = np.full((len(order), len(columns)), np.nan)
  figure, axes = plt.subplots(figsize=(2.0 + 1.1 * len(columns), 1.2 + 0.32 * len(order)))
  for i, encoding in enumerate(order):
    for j, column in enumerate(columns):
      if (cell := cells[encoding].get(column)) is not None:
        grid[i, j] = fraction(cell)
        axes.text(j, i, f"{cell['rank']}{' ' + cell['mark'] if cell['mark'] else ''}", ha='center', va='center',
                  fontsize=7, fontweight='bold' if cell['mark'] in ('+', '-') else 'normal')
  image = axes.imshow(grid, cmap='RdYlGn_r', vmin=0, vmax=1, aspect='auto')
  axes.set_xticks(range(len(columns)), [textwrap_label(c) for c in columns], fontsize=7, rotation=30, ha='right')
  axes.set_yticks(range(len(order)), order, fontsize=7)
  figure.colorbar(image, ax=axes, label='rank within the table (0 first, 1 last)', shrink=0.6)
  axes.set_title('Rank of each encoding by table; + / -: better / worse than the reference, established '
                 '(Holm, 5%); ref: the reference', fontsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=110, metadata={'Software': None})
  plt.close(figure)
  numbers = {'columns': columns, 'encodings': {encoding: cells[encoding] for encoding in order}}
  with written_whole(os.path.splitext(path)[0] + '.json') as f:
    json.dump(numbers, f, indent=1, ensure_ascii=False)
  return numbers


def textwrap_label(text: str, width: int = 28) -> str:
  return '\n'.join(textwrap.wrap(text, width))


def rank_agreement(table: SummaryTable, rows: Sequence[dict]) -> str:
  """Whether the table's order by its metric only repeats the order by the column `rank_also_at` (the fit at the
  training length): Spearman's rank correlation of the rows' means over the rows that have both, and its p."""
  column = table.rank_also_at
  pairs = [(row['stats'][table.metric]['mean'], row['stats'][column]['mean']) for row in rows
           if row['stats'].get(column, {}).get('mean') is not None]
  label = next((header for key, header in table.columns if key == column), column)
  if len(pairs) < 3:
    return f'Fewer than 3 rows have {label}: no rank correlation.'
  rho, p = scipy.stats.spearmanr(*zip(*pairs))
  measured = f'Spearman ρ = {rho:.2f} over {len(pairs)} rows, p {"" if p < 0.0005 else "= "}{p_cell(p)}'
  if rho > 0 and p < SIGNIFICANCE:
    return (f'The order here repeats the order at {label} ({measured}): this rank measures the fit at the training '
            'length as much as the extrapolation, which the contrast tests.')
  return f'The order here is not the order at {label} ({measured}).'


def caveats(rows: Sequence[dict]) -> list[str]:
  """What qualifies a table's verdict, from its run files: runs that ended at the step budget and how many of
  them had their best checkpoint at their last step (still improving); encodings with fewer than 3 seeds; and
  more than one device kind, matrix-product precision or code version among the table's runs."""
  runs = [run for row in rows for run in row['runs']]
  notes = []
  budget = [run for run in runs if run['ended'] == ENDINGS['num_train_steps']]
  if budget:
    rising = sum(run.get('best step') is not None and run['best step'] == run.get('last step') for run in budget)
    notes.append(f'{len(budget)} of {len(runs)} runs ended at the step budget, {rising} of them with the best '
                 f'checkpoint at the last step (still improving)')
  if few := [f"{row['encoding']} ({row['n']})" for row in rows if row['n'] < 3]:
    notes.append(f"fewer than 3 seeds: {', '.join(few)}")
  for what, key in (('devices', 'device'), ('matrix-product precisions', 'precision'), ('code versions', 'commit')):
    counts = collections.Counter(str(run.get(key) or 'not recorded') for run in runs)
    if len(counts) > 1:
      shown = [f"{value} ({count} run{'s' if count > 1 else ''})" for value, count in counts.most_common(3)]
      more = f' and {len(counts) - 3} more' if len(counts) > 3 else ''
      notes.append(f'{len(counts)} {what}: ' + ', '.join(shown) + more)
  return notes


def leads(table: SummaryTable, rows: Sequence[dict]) -> bool:
  """Whether the first row is separated from the second: their Welch p over seeds below 5% (one test per table)."""
  return len(rows) > 1 and significance(welch(rows[0], rows[1], table.metric)[0]) != 'not established'


def _first(table: SummaryTable, rows: Sequence[dict]) -> str:
  """'X leads Y by D (Welch p = P)' where the first row's margin over the second is significant over seeds (one
  test per table), else 'X ranks first, not separated from Y (...)'."""
  leader = rows[0]['encoding']
  if len(rows) < 2:
    return f'{leader} ranks first, alone'
  runner_up = rows[1]
  margin = abs(rows[0]['stats'][table.metric]['mean'] - runner_up['stats'][table.metric]['mean'])
  p, missing = welch(rows[0], runner_up, table.metric)
  test = f"Welch p = {p_cell(p)}" if p is not None else f'no Welch test: {missing}'
  if leads(table, rows):
    return f"{leader} leads {runner_up['encoding']} by {margin:.{table.digits}f} ({test})"
  return f"{leader} ranks first, not separated from {runner_up['encoding']} ({margin:.{table.digits}f}; {test})"


def summary_markdown(tables: Sequence[ScoredTable], link_prefix: str) -> str:
  """The summary block: what it is, the verdicts, the figure's link, then the tables. Links are relative to
  the file it goes into, `link_prefix` being the path from there to results/."""
  lines = ['## Summary', '',
           f'Generated by `python -m lra_posenc.studies.report` from the committed run files under '
           f'[`results/`]({link_prefix or "./"}); do not edit by hand. Mean ± sample std over seeds (n), ranked by '
           f'mean; Δ: difference of means from the reference encoding. Welch p: t-test over seeds, unequal '
           f'variances. Bootstrap p: paired over the test sentences, two-sided (the signed BLEU differences of 1000 '
           f'resamples, sacreBLEU\'s seed, centred on their mean), each side\'s seeds that recorded '
           f'bleu_statistics.json pooled. In brackets, Holm\'s adjustment within the '
           f'table (the family: its comparisons against the reference, per test); the words follow it: adjusted '
           f'p < 0.05 reads "significant at 5%", anything else "not established". The first row "leads" the '
           f'second only where their Welch p < 0.05; else it "ranks first, not separated". Ended: by patience '
           f'(validation stopped improving) or at the step budget; {NOT_RECORDED}: the run predates the record of '
           f'why it ended (read from a runs.csv, or a results.json without training_ended). Figure: '
           f'[{FIGURE_FILE}]({link_prefix}{FIGURE_FILE}).', '']
  lines += verdicts(tables) + ['']
  for number, (table, rows, unscored) in enumerate(tables, 1):
    lines += markdown_table(number, table, rows, link_prefix, unscored) + ['']
  return '\n'.join(lines[:-1]) + '\n'


def plot(tables: Sequence[ScoredTable], path: str) -> None:
  """One panel per table: each encoding's mean with its std as error bars, best first, the reference's mean
  dashed."""
  columns = 2
  figure, axes = plt.subplots((len(tables) + columns - 1) // columns, columns, figsize=(12, 4.5 * (
      (len(tables) + columns - 1) // columns)), squeeze=False)
  for panel, (number, (table, rows, _)) in zip(axes.flat, enumerate(tables, 1)):
    stats = [row['stats'][table.metric] for row in rows]
    positions = np.arange(len(rows))
    panel.errorbar(positions, [s['mean'] for s in stats], yerr=[s['std'] or 0.0 for s in stats], fmt='o',
                   capsize=4)
    reference = next(s['mean'] for row, s in zip(rows, stats) if row['encoding'] == table.reference)
    panel.axhline(reference, color='grey', linestyle='--', linewidth=1, label=f"{table.reference} (reference)")
    panel.set_xticks(positions, [f"{row['encoding']} (n={row['n']})" for row in rows], rotation=35, ha='right',
                     fontsize='small')
    axis = table.axis + (' (lower is better)' if table.lower_is_better else '')
    panel.set(title=f"{number}. {table.title}".replace('`', ''), ylabel=axis)
    panel.grid(alpha=0.3)
    panel.legend(fontsize='small')
  for panel in list(axes.flat)[len(tables):]:
    panel.set_visible(False)
  figure.suptitle('Mean over seeds, error bars: sample std (none where n=1)')
  figure.tight_layout()
  figure.savefig(path, dpi=100, metadata={'Software': None})
  plt.close(figure)


def with_block(text: str, block: str) -> str:
  """`text` (RESULTS.md) with `block` between the summary markers, the markers and block inserted after its
  first paragraph below the first heading where it has none."""
  wrapped = f'{SUMMARY_START}\n{block}{SUMMARY_END}\n'
  if SUMMARY_START in text:
    before, _, rest = text.partition(SUMMARY_START)
    _, found, after = rest.partition(SUMMARY_END)
    if not found:
      raise ValueError(f'{SUMMARY_START} without a following {SUMMARY_END} line')
    return before + wrapped + after.removeprefix('\n')
  lines = text.splitlines(keepends=True)
  index = next((i for i, line in enumerate(lines) if line.startswith('# ')), None)
  if index is None:
    raise ValueError(f'no {SUMMARY_START} block and no "# " heading to put the summary under')
  index += 1
  while index < len(lines) and not lines[index].strip():
    index += 1
  while index < len(lines) and lines[index].strip():
    index += 1
  return ''.join(lines[:index]) + '\n' + wrapped + ''.join(lines[index:])


def with_verdicts(text: str, tables: Sequence[ScoredTable]) -> str:
  """`text` (README.md) with the verdict lines between VERDICTS_START and VERDICTS_END, and the answer to "which
  encoding" (`which_encoding`) between WHICH_START and WHICH_END."""
  text = _with_lines(text, VERDICTS_START, VERDICTS_END, verdicts(tables))
  return _with_lines(text, WHICH_START, WHICH_END, which_encoding(tables))


def _with_lines(text: str, start_marker: str, end_marker: str, lines: Sequence[str]) -> str:
  before, start, rest = text.partition(start_marker)
  _, end, after = rest.partition(end_marker)
  if not start or not end:
    raise ValueError(f'no {start_marker} ... {end_marker} block in the README')
  return before + start_marker + '\n' + '\n'.join(lines) + '\n' + end_marker + after


def study_index(results_dir: str, documents: dict[str, str]) -> str:
  """results/README.md: per top-level folder, the sections of `documents` (name -> Markdown text: RESULTS.md,
  PERFORMANCE.md) that cite it and, from its runs' results.json provenance, how many runs, the commits that
  trained them, the hosts and the dates."""
  sections: dict[str, list[str]] = {}
  for name, text in documents.items():
    for folder, headings in _citing_sections(text).items():
      sections.setdefault(folder, []).extend(f'{name} § {heading}' for heading in headings)
  lines = ['# results/', '',
           'Generated by `python -m lra_posenc.studies.report`; do not edit by hand. One folder per study; what each '
           'shows, and the command that made it, are in the section named beside it. A study holds its runs as '
           '`runs/VARIANT/seed_S/` (each run\'s results.json, metrics.jsonl and config.json), its tables and plots, '
           f'its `{STUDY_FILE}` where the summary shows it (the task and the tables it declares), '
           'and, where more than one sweep command trained it, each command\'s own tables in `sweeps/NAME/` (NAME '
           'being the command\'s `--output_dir`). Runs, commits, hosts and dates are read from the `provenance` of '
           'every `results.json` under the folder (studies that committed only their tables have none).', '',
           '| folder | cited in | runs | trained at | host | dates |', '| --- | --- | --- | --- | --- | --- |']
  for folder in sorted(d for d in os.listdir(results_dir) if os.path.isdir(os.path.join(results_dir, d))):
    provenances = [read_json(path).get('provenance', {}) for path in sorted(
        os.path.join(directory, RESULTS_FILE) for directory, _, files in os.walk(os.path.join(results_dir, folder))
        if RESULTS_FILE in files)]
    commits = sorted({p['git_commit'][:7] for p in provenances if p.get('git_commit')})
    dates = sorted({p['date'][:10] for p in provenances if p.get('date')})
    hosts = sorted({sweep.trained_on(p) or 'not recorded' for p in provenances})
    cited = '; '.join(sections.get(folder, [])) or 'not cited'
    lines.append(f'| [{folder}/]({folder}/) | {cited} | {len(provenances) or "-"} | '
                 f'{", ".join(commits) or "-"} | {"; ".join(hosts) or "-"} | '
                 f'{" to ".join(dict.fromkeys([dates[0], dates[-1]])) if dates else "-"} |')
  return '\n'.join(lines) + '\n'


def index_documents(results_md: str) -> dict[str, str]:
  """RESULTS.md and, beside it, PERFORMANCE.md: the documents whose sections the index names."""
  documents = {}
  for path in (results_md, os.path.join(os.path.dirname(results_md), 'PERFORMANCE.md')):
    if os.path.exists(path):
      with open(path) as f:
        documents[os.path.basename(path)] = f.read()
  return documents


def _citing_sections(markdown: str) -> dict[str, list[str]]:
  """Per results/ folder, the `## ` headings whose sections cite it, in order (a generated summary left out)."""
  cited: dict[str, list[str]] = {}
  heading, in_summary = None, False
  for line in markdown.splitlines():
    if line.strip() in (SUMMARY_START, SUMMARY_END):
      in_summary = line.strip() == SUMMARY_START
    elif line.startswith('## '):
      heading = line[3:].strip()
    elif heading and not in_summary:
      for folder in re.findall(r'results/([\w.-]+)', line):
        if heading not in cited.setdefault(folder, []):
          cited[folder].append(heading)
  return cited


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--results_dir', default='results', help='The committed results tree.')
  parser.add_argument('--results_md', default='RESULTS.md', help='The file whose summary block is replaced.')
  parser.add_argument('--readme', default='', help='The file whose verdicts block is replaced; default: the '
                                                   'README.md beside --results_md.')
  parser.add_argument('--update_results_md', action=argparse.BooleanOptionalAction, default=True,
                      help='Replace (or insert) the summary block of --results_md, and replace the verdicts block '
                           'of --readme.')
  args = parser.parse_args(argv)
  tables = summary_tables(args.results_dir)
  summary = summary_markdown(tables, '')
  with written_whole(os.path.join(args.results_dir, SUMMARY_FILE)) as f:
    f.write(summary)
  plot(tables, os.path.join(args.results_dir, FIGURE_FILE))
  rank_figure(tables, os.path.join(args.results_dir, RANKS_FILE))
  with written_whole(os.path.join(args.results_dir, INDEX_FILE)) as f:
    f.write(study_index(args.results_dir, index_documents(args.results_md)))
  if args.update_results_md:
    prefix = os.path.relpath(args.results_dir, os.path.dirname(os.path.abspath(args.results_md))) + '/'
    with open(args.results_md) as f:
      updated = with_block(f.read(), summary_markdown(tables, prefix))
    with written_whole(args.results_md) as f:  # Hand-written text around the block: never left half-written.
      f.write(updated)
    readme = args.readme or os.path.join(os.path.dirname(os.path.abspath(args.results_md)), 'README.md')
    with open(readme) as f:
      updated = with_verdicts(f.read(), tables)
    with written_whole(readme) as f:
      f.write(updated)
  print(summary, end='')


if __name__ == '__main__':
  main()
