"""Deterministic, resumable, host-sharded batching of in-memory arrays.

Batch i of training is a pure function of (seed, i): epoch e = i // batches_per_epoch
reads a permutation drawn from (seed, e). Resuming is starting from the saved index.
Each host keeps its own contiguous slice of every global batch.
"""
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence

import jax
import numpy as np

Batch = dict[str, np.ndarray]
# Evaluation batches sorted by length are cut to their longest example rounded up to a multiple of
# this, so a split compiles a few shapes rather than one per batch.
EVAL_LENGTH_MULTIPLE = 8


@dataclasses.dataclass(frozen=True)
class HostShard:
  index: int
  count: int

  @classmethod
  def current(cls) -> 'HostShard':
    return cls(jax.process_index(), jax.process_count())

  def slice(self, global_batch_size: int) -> slice:
    if global_batch_size % self.count:
      raise ValueError(f'batch size {global_batch_size} is not divisible by the {self.count} hosts')
    size = global_batch_size // self.count
    return slice(self.index * size, (self.index + 1) * size)


@dataclasses.dataclass(frozen=True)
class CountedBatches:
  """Batches whose number is known before they are made (for progress and ETA); iterable again and again."""
  make: Callable[[], Iterator[Batch]]
  count: int

  def __iter__(self) -> Iterator[Batch]:
    return self.make()

  def __len__(self) -> int:
    return self.count


class ArrayDataset:
  """Aligned example arrays (first axis = example) with train and eval batch views."""

  def __init__(self, arrays: Mapping[str, np.ndarray]):
    sizes = {len(a) for a in arrays.values()}
    if len(sizes) != 1:
      raise ValueError(f'arrays have different numbers of examples: { {k: len(a) for k, a in arrays.items()} }')
    self.arrays = dict(arrays)
    self.size = sizes.pop()

  @functools.lru_cache(maxsize=2)
  def _permutation(self, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(self.size)

  def train_batches(self, batch_size: int, *, seed: int, start: int = 0,
                    shard: HostShard | None = None) -> Iterator[Batch]:
    """Endless shuffled full batches from global batch index `start` on."""
    if batch_size > self.size:
      raise ValueError(f'batch size {batch_size} exceeds the {self.size} training examples')
    host_slice = (shard or HostShard.current()).slice(batch_size)
    batches_per_epoch = self.size // batch_size
    index = start
    while True:
      epoch, offset = divmod(index, batches_per_epoch)
      rows = self._permutation(seed, epoch)[offset * batch_size:(offset + 1) * batch_size][host_slice]
      yield {k: a[rows] for k, a in self.arrays.items()} | {'weight': np.ones(len(rows), np.float32)}
      index += 1

  @functools.lru_cache(maxsize=2)
  def _bucketed_epoch(self, seed: int, epoch: int, batch_sizes: tuple[int, ...], buckets: tuple[int, ...],
                      lengths_key: str) -> list[tuple[int, np.ndarray]]:
    """(bucket length, rows) of every full batch of one epoch, in a seeded random order."""
    rng = np.random.default_rng([seed, epoch])
    lengths = self.arrays[lengths_key]
    batches = []
    for lower, upper, size in zip((0,) + buckets[:-1], buckets, batch_sizes):
      rows = rng.permutation(np.flatnonzero((lengths > lower) & (lengths <= upper)))
      batches += [(upper, rows[i:i + size]) for i in range(0, len(rows) - size + 1, size)]
    return [batches[i] for i in rng.permutation(len(batches))]

  def train_batch_shape(self, batch_size: int, *, length: int | None = None, sequence_keys: Sequence[str] = (),
                        shard: HostShard | None = None) -> dict[str, jax.ShapeDtypeStruct]:
    """The shape of this host's slice of a training batch of `batch_size` examples, its `sequence_keys` arrays
    cut to `length`: what `train_batches` yields, or `bucketed_train_batches` for one bucket."""
    host_slice = (shard or HostShard.current()).slice(batch_size)
    rows = host_slice.stop - host_slice.start
    shapes = {k: jax.ShapeDtypeStruct((rows,) + ((length,) + a.shape[2:] if k in sequence_keys else a.shape[1:]),
                                      a.dtype)
              for k, a in self.arrays.items()}
    return shapes | {'weight': jax.ShapeDtypeStruct((rows,), np.float32)}

  def _bucket_batch_sizes(self, batch_size: int, buckets: tuple[int, ...], lengths_key: str, max_tokens: int,
                          multiple_of: int) -> tuple[int, ...]:
    """Examples per batch of each length bucket, after checking the buckets hold every example."""
    if list(buckets) != sorted(set(buckets)):
      raise ValueError(f'length buckets {buckets} must be strictly increasing')
    lengths = self.arrays[lengths_key]
    if lengths.max() > buckets[-1]:
      raise ValueError(f'an example of length {lengths.max()} exceeds the largest bucket {buckets[-1]}')
    return (token_budget_batch_sizes(buckets, max_tokens, batch_size, multiple_of) if max_tokens
            else (batch_size,) * len(buckets))

  def bucketed_train_batches(self, batch_size: int, *, buckets: Sequence[int], lengths_key: str,
                             sequence_keys: Sequence[str], seed: int, start: int = 0, max_tokens: int = 0,
                             multiple_of: int = 1, shard: HostShard | None = None) -> Iterator[Batch]:
    """Endless shuffled full batches of examples of similar length, cut to their bucket's length.

    An example of length n (`arrays[lengths_key]`) belongs to the first bucket >= n; each
    batch holds one bucket's examples with the `sequence_keys` arrays cut to that bucket,
    so short sentences are not padded to the longest. A few shapes, one per bucket, compile.
    With `max_tokens`, a bucket's batches hold `token_budget_batch_sizes` examples (at most
    `batch_size`, a multiple of `multiple_of`), else `batch_size` each.
    """
    buckets = tuple(buckets)
    sizes = self._bucket_batch_sizes(batch_size, buckets, lengths_key, max_tokens, multiple_of)
    shard = shard or HostShard.current()
    batches_per_epoch = len(self._bucketed_epoch(seed, 0, sizes, buckets, lengths_key))
    if not batches_per_epoch:
      raise ValueError(f'no length bucket of {buckets} holds a full batch ({dict(zip(buckets, sizes))} examples)')
    index = start
    while True:
      epoch, offset = divmod(index, batches_per_epoch)
      length, rows = self._bucketed_epoch(seed, epoch, sizes, buckets, lengths_key)[offset]
      rows = rows[shard.slice(len(rows))]
      batch = {k: a[rows][:, :length] if k in sequence_keys else a[rows] for k, a in self.arrays.items()}
      yield batch | {'weight': np.ones(len(rows), np.float32)}
      index += 1

  def bucketed_train_batch_shapes(self, batch_size: int, *, buckets: Sequence[int], lengths_key: str,
                                  sequence_keys: Sequence[str], seed: int, max_tokens: int = 0, multiple_of: int = 1,
                                  shard: HostShard | None = None) -> tuple[dict[str, jax.ShapeDtypeStruct], ...]:
    """The shapes `bucketed_train_batches` (same arguments) yields, shortest first: one per bucket that holds a
    full batch (every epoch has the same batches per bucket, in another order)."""
    buckets = tuple(buckets)
    sizes = self._bucket_batch_sizes(batch_size, buckets, lengths_key, max_tokens, multiple_of)
    size_by_length = dict(zip(buckets, sizes))
    used = sorted({length for length, _ in self._bucketed_epoch(seed, 0, sizes, buckets, lengths_key)})
    return tuple(self.train_batch_shape(size_by_length[length], length=length, sequence_keys=sequence_keys,
                                        shard=shard) for length in used)

  def eval_batches(self, batch_size: int, *, shard: HostShard | None = None, lengths_key: str | None = None,
                   sequence_keys: Sequence[str] = ()) -> CountedBatches:
    """Every example once, in order; the last batch is padded with zero-weight rows.

    With `lengths_key`, examples go shortest first, and each batch's `sequence_keys` arrays
    are cut to its longest example rounded up to EVAL_LENGTH_MULTIPLE (a few shapes compile), so
    short sentences are not padded to the split's longest; sums over the batches are the
    same up to float rounding. The width is the global batch's, so every host has one shape.
    """
    host_slice = (shard or HostShard.current()).slice(batch_size)
    lengths = self.arrays[lengths_key] if lengths_key else None
    order = np.argsort(lengths, kind='stable') if lengths_key else np.arange(self.size)

    def make() -> Iterator[Batch]:
      for begin in range(0, self.size, batch_size):
        positions = np.arange(begin, begin + batch_size)
        real = positions < self.size
        rows = order[np.where(real, positions, 0)]
        width = None if lengths is None else (
            -(-int(lengths[rows[real]].max()) // EVAL_LENGTH_MULTIPLE) * EVAL_LENGTH_MULTIPLE)
        rows, real = rows[host_slice], real[host_slice]
        batch = {k: a[rows][:, :width] * _broadcast(real, a) if k in sequence_keys else a[rows] * _broadcast(real, a)
                 for k, a in self.arrays.items()}
        yield batch | {'weight': real.astype(np.float32)}

    return CountedBatches(make, -(-self.size // batch_size))


def token_budget_batch_sizes(buckets: Sequence[int], max_tokens: int, max_examples: int, multiple_of: int
                             ) -> tuple[int, ...]:
  """Examples per batch of each length bucket under a budget of `max_tokens` padded tokens (fairseq's
  --max-tokens, with --batch-size as `max_examples`), rounded down to a multiple of `multiple_of` (the devices).

  A batch of bucket length L holds min(max_examples, max_tokens // L) examples, so short-sentence
  batches are not starved and long ones do not blow the step. A bucket that cannot hold
  `multiple_of` examples is an error naming it.
  """
  sizes = tuple(min(max_examples, max_tokens // length) // multiple_of * multiple_of for length in buckets)
  for length, size in zip(buckets, sizes):
    if not size:
      raise ValueError(f'training.max_tokens={max_tokens} holds fewer than {multiple_of} examples of the length '
                       f'bucket {length} ({multiple_of} devices need one each); raise it to at least '
                       f'{length * multiple_of}')
  return sizes


def _broadcast(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
  return mask.reshape(mask.shape + (1,) * (like.ndim - 1)).astype(like.dtype)
