"""paddlefit: predict, run and tune PaddlePaddle training jobs on the hardware they will run on.

Usage: ``paddlefit plan resnet50 --batch-size 256`` (see README.md).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
