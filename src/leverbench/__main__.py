"""``python -m leverbench``: the command line, as the ``leverbench`` script."""

from .cli import main

if __name__ == "__main__":
    main()
