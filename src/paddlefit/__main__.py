"""``python -m paddlefit``: the same CLI as the ``paddlefit`` script (``paddlefit.cli.main:main``)."""

from paddlefit.cli.main import main

if __name__ == "__main__":
    main()
