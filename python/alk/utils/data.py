"""alk.utils.data: torch.utils.data's Dataset, TensorDataset, DataLoader and random_split.

    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    for xb, yb in loader: ...

Batches are collated like PyTorch's default_collate: tensors are stacked, numbers become
tensors, tuples, lists and dicts are collated field by field. shuffle draws from alk's
generator (alk.manual_seed). Workers (num_workers > 0) are refused: alk runs its kernels on
its own threads. torch's DataLoader also works over alk tensors (its collate stacks with
torch, so give it collate_fn=alk.utils.data.default_collate)."""
import numbers

import numpy as _np

from .. import _C
from .._C import Tensor


class Dataset:
    """A map-style dataset: __getitem__(i) and __len__."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} has no __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Samples are the tensors' rows at one index: (x[i], y[i], ...)."""

    def __init__(self, *tensors):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError(f"Size mismatch between tensors (at {_C._caller()})")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        self.cumulative_sizes = _np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self):
        return self.cumulative_sizes[-1] if self.cumulative_sizes else 0

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        k = int(_np.searchsorted(self.cumulative_sizes, index, side="right"))
        start = self.cumulative_sizes[k - 1] if k else 0
        return self.datasets[k][index - start]


class Subset(Dataset):
    """The samples of dataset at indices."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Subsets of the given lengths (or fractions) over a random permutation (alk's generator)."""
    if generator is not None:
        raise NotImplementedError(f"random_split: generators are not supported by alk (at {_C._caller()})")
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) < 1e-9:
        sizes = [int(n * f) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError(f"Sum of input lengths does not equal the length of the input dataset! "
                         f"(at {_C._caller()})")
    from .. import randperm
    order = randperm(n).tolist()
    out, at = [], 0
    for k in lengths:
        out.append(Subset(dataset, order[at:at + k]))
        at += k
    return out


def default_collate(batch):
    """A list of samples as one batch: tensors stacked, numbers as a tensor, containers field by field."""
    first = batch[0]
    if isinstance(first, Tensor):
        return _C.stack(list(batch), 0)
    if isinstance(first, _np.ndarray):
        return _C.from_numpy(_np.stack(batch))
    if isinstance(first, bool):
        return _C.tensor(list(batch))
    if isinstance(first, numbers.Integral):
        return _C.tensor(list(batch), dtype=_C.dtype.int64)
    if isinstance(first, numbers.Real):
        return _C.tensor(list(batch), dtype=_C.dtype.float64)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, dict):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, (tuple, list)):
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {type(first).__name__} (at {_C._caller()})")


class DataLoader:
    """Batches of a dataset: batch_size samples at a time, in order or shuffled each epoch."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 generator=None, prefetch_factor=None, persistent_workers=False):
        if num_workers:
            raise NotImplementedError(f"DataLoader: num_workers > 0 is not supported by alk (at {_C._caller()})")
        if generator is not None:
            raise NotImplementedError(f"DataLoader: generators are not supported by alk (alk.manual_seed seeds "
                                      f"the shuffle) (at {_C._caller()})")
        if sampler is not None and shuffle:
            raise ValueError(f"sampler option is mutually exclusive with shuffle (at {_C._caller()})")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError(f"batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                             f"drop_last (at {_C._caller()})")
        self.dataset, self.batch_size, self.shuffle, self.sampler = dataset, batch_size, shuffle, sampler
        self.batch_sampler, self.drop_last = batch_sampler, drop_last
        self.collate_fn = collate_fn or default_collate

    def _indices(self):
        if self.sampler is not None:
            return list(self.sampler)
        n = len(self.dataset)
        if self.shuffle:
            from .. import randperm
            return randperm(n).tolist()
        return list(range(n))

    def _batches(self):
        if self.batch_sampler is not None:
            yield from self.batch_sampler
            return
        order = self._indices()
        if self.batch_size is None:
            yield from ([i] for i in order)
            return
        for at in range(0, len(order), self.batch_size):
            chunk = order[at:at + self.batch_size]
            if len(chunk) < self.batch_size and self.drop_last:
                return
            yield chunk

    def __iter__(self):
        for chunk in self._batches():
            if self.batch_size is None and self.batch_sampler is None:
                yield self.dataset[chunk[0]]
            else:
                yield self.collate_fn([self.dataset[i] for i in chunk])

    def __len__(self):
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
