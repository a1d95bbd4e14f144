"""The example jobs' data sets and loss adapters (``examples/*.yaml`` name them by their shipped names or as
``paddlefit.examples.<module>:<factory>``): ``datasets`` (digits, digits-warped, sentiment-zh, shapes, from installed
packages), ``ocr`` (PaddleOCR's recognition and detection examples), ``det`` (PicoDet's). No download: every sample
is generated or comes from an installed package."""
