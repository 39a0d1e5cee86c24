"""Devices and processes: start-up, one writer per file, decisions all hosts share, where the steps' arguments
live, stop signals, and the compilation cache.

Host-side code is written as if every line ran on N hosts at once sharing one disk: a file has one writer (process
0) and the others wait at a barrier before reading it; every decision that could differ between hosts (a probe of
the workdir, whether a checkpoint can be read) is gathered from all of them, so every host acts alike.

The pmapped steps' arguments live on the local devices, along the `AXIS` mesh axis.

SIGTERM (preemption) and SIGINT (Ctrl-C) become a request the train loop polls. The loop then runs up to 10 steps
more (the request travels to every host inside a train step and is read every 5 steps: trainer.AgreedStop), saves a
checkpoint and returns, in one process or many, every process after the same step. A second Ctrl-C interrupts at
once, as Python's default would.

XLA's persistent compilation cache compiles a program once per machine, not once per process or run: on an H100
the LRA ListOps train step took 82-190 s to compile in every process; with the cache, seeds, resumed runs and
re-runs of one setting find it on disk.
"""
import collections
import hashlib
import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from lra_posenc.training.batches import Batch

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


AXIS = 'batch'


def local_devices_sharding() -> jax.sharding.NamedSharding:
  """Where the pmapped steps put their outputs: leading axis split over the local devices, a mesh of axis `AXIS`."""
  mesh = jax.sharding.Mesh(np.array(jax.local_devices()), (AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def replicate(tree: Any) -> Any:
  """`tree` copied to every local device, placed as the pmapped steps place their outputs.

  A step's program is cached by its arguments' placement too: fed flax's `replicate` (another mesh) first
  and its own output state after, the train step compiled twice for one shape.
  """
  sharding, devices = local_devices_sharding(), jax.local_device_count()
  return jax.tree.map(lambda x: jax.device_put(np.broadcast_to(np.asarray(x), (devices,) + np.shape(x)), sharding),
                      tree)


def shard(batch: Batch) -> Batch:
  """[host_batch, ...] -> [local_devices, host_batch / local_devices, ...]."""
  return jax.tree.map(lambda x: x.reshape((jax.local_device_count(), -1) + x.shape[1:]), batch)


def device_batches(host_batches: Iterable[Batch], size: int) -> Iterator[Batch]:
  """Host batches split over the local devices (`shard`) and put there `size` ahead, placed as `replicate`.

  On a CPU they stay NumPy arrays, which the pmapped step takes in 20 us where `jax.device_put` costs 150 us
  of a host thread that the step's own threads compete with (the pipeline gap of PERFORMANCE.md).
  """
  if jax.default_backend() == 'cpu':
    yield from map(shard, host_batches)
    return
  sharding = local_devices_sharding()
  to_devices = lambda batch: jax.device_put(shard(batch), sharding)  # One call for every leaf: less host time.
  host_batches = iter(host_batches)
  queue = collections.deque(map(to_devices, itertools.islice(host_batches, size)))
  while queue:
    yield queue.popleft()
    queue.extend(map(to_devices, itertools.islice(host_batches, 1)))


def stop_requests(requested: bool) -> jax.Array:
  """The pmapped train step's `stop_requested`, already on the local devices (no transfer per step)."""
  return replicate(jnp.asarray(requested))


def host_copy(replicated: Any) -> Any:
  """One copy of a replicated tree or of pmapped outputs (every local device holds the same), fetched to the
  host: the first local device's values, indexed on the host, as indexing a device array would dispatch a
  computation per leaf."""
  return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data)[0], replicated)


SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
  """A context manager that routes SIGTERM and SIGINT to `requested()` while it is open."""

  def __init__(self):
    self._event = threading.Event()
    self._previous = {}

  def requested(self) -> bool:
    return self._event.is_set()

  def _handle(self, signum, frame) -> None:
    del frame
    if signum == signal.SIGINT:  # A second Ctrl-C goes to Python's handler: KeyboardInterrupt.
      signal.signal(signal.SIGINT, self._previous.get(signal.SIGINT, signal.default_int_handler))
    logging.warning('%s received: saving a checkpoint after this step, then stopping',
                    signal.Signals(signum).name)
    self._event.set()

  def __enter__(self) -> 'StopSignals':
    if threading.current_thread() is threading.main_thread():  # Only the main thread may set handlers.
      self._previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def close(self) -> None:
    """Gives SIGTERM and SIGINT back to the handlers from before (a second call does nothing)."""
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}


# A compiled CPU program assumes the processor it was built for: its instruction set goes in the key.
CPU_FEATURES_FILE = '/proc/cpuinfo'


def compilation_cache_directory() -> str:
  """A per-user cache directory ($XDG_CACHE_HOME, else ~/.cache), one folder per jax version and device."""
  root = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(root, 'lra_posenc', 'xla', _machine_key())


def _machine_key() -> str:
  device = jax.local_devices()[0]
  key = f'jax-{jax.__version__}_{device.platform}_{device.device_kind}'
  if device.platform == 'cpu' and os.path.exists(CPU_FEATURES_FILE):
    with open(CPU_FEATURES_FILE) as f:
      flags = next((line for line in f if line.startswith('flags')), '')
    key += '_' + hashlib.sha256(flags.encode()).hexdigest()[:12]
  return ''.join(c if c.isalnum() or c in '-_.' else '-' for c in key)


def enable_compilation_cache(directory: str) -> None:
  """Caches every compiled program that took a second or more under `directory`; '' turns the cache off, even
  where jax's JAX_COMPILATION_CACHE_DIR variable names one."""
  if not directory:
    jax.config.update('jax_compilation_cache_dir', None)
    logging.info('persistent compilation cache: off')
    return
  os.makedirs(directory, exist_ok=True)
  jax.config.update('jax_compilation_cache_dir', directory)
  logging.info('persistent compilation cache: %s (--compilation_cache_dir= turns it off)', directory)
