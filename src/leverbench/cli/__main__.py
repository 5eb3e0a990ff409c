"""``python -m leverbench.cli``: the ``leverbench`` command."""

from . import main

if __name__ == "__main__":
    main()
