"""Hardware catalog: GPU specs shipped as data (``catalog/data/gpus.csv``), each row with its source.

Modules: ``gpus`` (GPU specs, name/alias matching, the catalog as CSV/JSON), ``price_csv`` (price rows and their
parser), ``skypilot`` (SkyPilot's local catalog cache), ``prices`` (the rows ``cost`` uses, instance -> GPU, the
price of one instance type), ``builds`` (Paddle Docker images per version: CUDA, cuDNN, minimum driver),
``transformers`` (published transformer configs, ``catalog/data/transformers.json``, and their one type),
``units`` (the one compute-unit vocabulary: fp32, tf32, half, int8; a unit's peak and label).

No Paddle import here, so ``paddlefit gpus`` starts fast.
"""

from paddlefit.catalog.gpus import GPU, get_gpu, load_gpus

__all__ = ["GPU", "get_gpu", "load_gpus"]
