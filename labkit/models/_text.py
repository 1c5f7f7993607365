"""sample_text: continue a text with a character model, one character at a time."""

from __future__ import annotations

import numpy as np

from ..autograd import no_grad
from ..backend.random import Generator


def sample_text(step, vocab, prime, length=200, temperature=1.0, seed=0):
    """``prime`` continued by ``length`` characters drawn from a character model.

    ``step(ids, state) -> (logits, state)`` advances the model by one character: ``ids`` is an
    int64 array of shape (1,), ``state`` is None at the start, ``logits`` a Tensor or array of
    shape (1, len(vocab)). ``vocab`` maps an index to its character (a str or a list).
    ``temperature`` divides the logits (0: always the most likely character); the draws come
    from a Philox generator seeded by ``seed``, so a sample repeats exactly.

    Examples
    --------
    >>> import numpy as np
    >>> step = lambda ids, state: (np.log([[0.1, 0.9]]), state)   # "b" nine times in ten
    >>> sample_text(step, "ab", "a", length=5, temperature=0)
    'abbbbb'
    """
    index = {c: i for i, c in enumerate(vocab)}
    unknown = sorted(set(prime) - set(index))
    if not prime or unknown:
        raise ValueError(f"sample_text: prime must be a non-empty text in the vocabulary; "
                         f"{'it is empty' if not prime else f'not in it: {unknown}'}")
    if temperature < 0:
        raise ValueError(f"sample_text: temperature must be >= 0, got {temperature}")
    g = Generator(seed, "cpu")
    out, state = [], None
    with no_grad():
        for c in prime:
            logits, state = step(np.array([index[c]], np.int64), state)
        for _ in range(length):
            z = np.asarray(logits.numpy() if hasattr(logits, "numpy") else logits,
                           np.float64).reshape(-1)
            if temperature == 0:
                k = int(z.argmax())
            else:
                p = np.exp((z - z.max()) / temperature)
                cdf = np.cumsum(p / p.sum())
                k = min(int(np.searchsorted(cdf, float(g.uniform((1,))[0]), side="right")),
                        len(cdf) - 1)
            out.append(vocab[k])
            logits, state = step(np.array([k], np.int64), state)
    return prime + "".join(out)
