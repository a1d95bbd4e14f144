"""Hardware catalog: GPU specs shipped as data (``catalog/data/gpus.csv``), each row with its source.

No Paddle import here, so ``paddlefit gpus`` starts fast.
"""

from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus

__all__ = ["GPU", "get_gpu", "load_gpus"]
