"""Progress reports: counts, percentages, ETA, and a last line for every phase."""
import io

from absl import logging as absl_logging

from lra_posenc import progress


def test_progress_reports_count_percentage_and_an_eta_from_the_rate(monkeypatch):
  clock = iter([0.0, 0.0, 10.0, 10.0])  # Start, then one update and its description 10 s later.
  monkeypatch.setattr(progress.time, 'perf_counter', lambda: next(clock))
  report = progress.Progress('evaluating', 4, unit='batches', every_seconds=5.0, stream=io.StringIO())
  report.update()
  assert report.describe(now=10.0) == 'evaluating: 1/4 batches (25%), 10.0 s elapsed, ETA 30.0 s'


def test_track_logs_plain_lines_off_a_terminal_and_always_a_last_line(monkeypatch):
  logged = []
  monkeypatch.setattr(absl_logging, 'info', lambda message, *args: logged.append(message % args if args else message))
  items = list(progress.track(range(3), 'decoding', unit='batches', every_seconds=0.0))
  assert items == [0, 1, 2]
  assert logged[0].startswith('decoding: 1/3 batches (33%), ') and 'ETA' in logged[0]
  assert logged[-1].startswith('decoding: 3/3 batches in ')


def test_unknown_totals_count_without_a_percentage():
  report = progress.Progress('generating', None, unit='expressions', stream=io.StringIO())
  report.update(5)
  assert report.describe().startswith('generating: 5 expressions, ') and 'ETA' not in report.describe()
