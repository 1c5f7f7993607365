"""labkit.models: a small zoo of models that train offline on data labkit ships, each one file
with its training script, and the weights they produced.

::

    import labkit as lk
    model = lk.models.load("cnn-digits", device="cl")   # shipped weights, eval mode, offline
    lk.models.available()                                # ['cnn-digits', ...]

    python -m labkit.models.cnn --device cl              # train it again (see each module)

Modules: ``cnn`` (digits classifier), ``vae`` (variational autoencoder), ``resnet`` (residual
blocks, batch norm, augmentation), ``dcgan`` (a GAN judged by the CNN), ``charlstm``
(a character LSTM language model). Helpers the examples share live here too: ``image_grid``
draws images as one PNG, ``sample_text`` continues a text with a character model.
"""

from ._grid import ImageGrid, image_grid
from ._text import sample_text
from ._weights import available, info, load, save

__all__ = ["ImageGrid", "available", "image_grid", "info", "load", "sample_text", "save"]
