"""labkit.data: datasets, schemes, streams, transformers and worker processes (Fuel's nouns).

::

    import labkit as lk
    from labkit.data import DataStream, Parallel, ScaleAndShift

    train = lk.data.get("digits", split="train")            # an H5Dataset
    stream = DataStream(train, batch_size=128, shuffle=True, seed=0)
    stream = Parallel(ScaleAndShift(stream, 1 / 16, which_sources="features"), workers=2)
    for batch in stream:                                     # the rest of this epoch
        batch["features"], batch["targets"]
    state = stream.state_dict()                              # JSON: seeds, epoch, position
    stream.load_state_dict(state)                            # continues exactly, in any process

Every component's state is data; a resumed stream yields exactly the batches the uninterrupted
one would, with shuffling, random augmentation and any number of worker processes.
"""

from .converters import (
    CONVERTERS,
    convert_cifar10,
    convert_digits,
    convert_h5,
    convert_mnist,
    convert_npz,
    convert_text,
    dataset_path,
    get,
    read_idx,
)
from .datasets import Dataset, H5Dataset, IndexableDataset, write_h5
from .schemes import (
    Scheme,
    SequentialExampleScheme,
    SequentialScheme,
    ShardedScheme,
    ShuffledExampleScheme,
    ShuffledScheme,
)
from .streams import DataStream, RandomTransformer, Stream, Transformer
from .transformers import (
    Batch,
    Bucket,
    Cast,
    Filter,
    Flatten,
    Mapping,
    NGrams,
    Normalize,
    OneHot,
    Padding,
    Prefetch,
    RandomCrop,
    RandomFlip,
    ScaleAndShift,
    SortByLength,
    Unpack,
)
from .workers import Parallel

__all__ = [
    "CONVERTERS", "Batch", "Bucket", "Cast", "DataStream", "Dataset", "Filter", "Flatten",
    "H5Dataset", "IndexableDataset", "Mapping", "NGrams", "Normalize", "OneHot", "Padding",
    "Parallel", "Prefetch", "RandomCrop", "RandomFlip", "RandomTransformer", "ScaleAndShift",
    "Scheme", "SequentialExampleScheme", "SequentialScheme", "ShardedScheme",
    "ShuffledExampleScheme", "ShuffledScheme", "SortByLength", "Stream", "Transformer", "Unpack",
    "convert_cifar10", "convert_digits", "convert_h5", "convert_mnist", "convert_npz",
    "convert_text", "dataset_path", "get", "read_idx", "write_h5",
]
