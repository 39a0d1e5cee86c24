"""Where the pmapped steps' arguments live: the local devices, along the `AXIS` mesh axis."""
import collections
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lra_posenc.training.batches import Batch

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
