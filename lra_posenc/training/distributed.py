"""Several processes, one run: start-up, one writer per file, and decisions all hosts share.

Host-side code is written as if every line ran on N hosts at once sharing one disk: a
file has one writer (process 0) and the others wait at a barrier before reading it;
every decision that could differ between hosts (a probe of the workdir, whether a
checkpoint can be read) is gathered from all of them, so every host acts alike.
"""
import socket
import time
from collections.abc import Callable, Mapping

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils


def initialize(*, coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, timeout_seconds: int = 300) -> None:
  """`jax.distributed.initialize`: auto-detected (TPU, SLURM, Open MPI) when given no arguments.

  Cross-process collectives on the CPU backend use gloo (it only affects that backend, so
  GPU and TPU runs are unchanged). A coordinator that does not answer within
  `timeout_seconds` is an error naming the address: JAX's own client would abort the
  process with a C++ stack trace instead.
  """
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  deadline = time.monotonic() + timeout_seconds
  if coordinator_address and process_id:  # Process 0 starts the coordinator; an auto-detected id is None.
    _wait_for_coordinator(coordinator_address, deadline, f'process {process_id} of {num_processes}')
  jax.distributed.initialize(coordinator_address, num_processes, process_id,
                             initialization_timeout=max(1, round(deadline - time.monotonic())))
  logging.info('process %d of %d; %d local of %d devices', jax.process_index(), jax.process_count(),
               jax.local_device_count(), jax.device_count())


def _wait_for_coordinator(address: str, deadline: float, who: str) -> None:
  host, _, port = address.rpartition(':')
  if not host or not port.isdigit():
    raise ValueError(f'--coordinator_address={address!r} is not HOST:PORT')
  while True:
    try:
      socket.create_connection((host.strip('[]'), int(port)), timeout=1).close()
      return
    except OSError as error:
      if time.monotonic() > deadline:
        raise ConnectionError(f'{who} could not reach the coordinator at {address} ({error}); start process 0 '
                              'first, check the address and port, or raise --distributed_timeout') from None
      time.sleep(0.5)


def with_xla_flags(environment: Mapping[str, str], *flags: str) -> dict[str, str]:
  """`environment` with `flags` added to its XLA_FLAGS, each replacing an earlier value of the same flag.

  For a process started with forced CPU devices or another XLA option: it keeps the flags its
  parent was given (a user's, the test suite's) rather than losing them.
  """
  names = {flag.split('=', 1)[0] for flag in flags}
  kept = [flag for flag in environment.get('XLA_FLAGS', '').split() if flag.split('=', 1)[0] not in names]
  return {**environment, 'XLA_FLAGS': ' '.join(kept + list(flags))}


def is_primary() -> bool:
  """Whether this process writes the files every process shares (results, logs, data)."""
  return jax.process_index() == 0


def gather_flags(flag: bool) -> np.ndarray:
  """Every process's `flag`, indexed by process."""
  if jax.process_count() == 1:
    return np.asarray([flag])
  return np.asarray(multihost_utils.process_allgather(np.asarray(flag, np.int32))).reshape(-1).astype(bool)


def check_everywhere(check: Callable[[], None], what: str) -> None:
  """Runs `check` on every process; if it fails on any, every process raises naming which.

  A failure on one host alone would otherwise leave the others waiting at their next
  barrier until a timeout.
  """
  if jax.process_count() == 1:
    check()
    return
  error = None
  try:
    check()
  except Exception as raised:  # Re-raised below, once every host knows.
    error = raised
  failed = np.flatnonzero(~gather_flags(error is None)).tolist()
  if error is not None:
    raise error
  if failed:
    raise RuntimeError(f'{what} failed on process(es) {failed} of {jax.process_count()}; see their logs')


def on_primary(produce: Callable[[], None], what: str) -> None:
  """Runs `produce` (a writer of shared files) on process 0 only; the others wait until it is done.

  If it fails on process 0, every process raises, so none reads a half-written file.
  """
  if jax.process_count() == 1:
    produce()
    return
  error = None
  if is_primary():
    try:
      produce()
    except Exception as raised:  # Re-raised below, once every host knows.
      error = raised
  succeeded = gather_flags(error is None)[0]
  if error is not None:
    raise error
  if not succeeded:
    raise RuntimeError(f'{what} failed on process 0; see its log')
