"""``python -m platoon``: the same entry point as the ``platoon`` console script."""

from platoon.cli import main

if __name__ == "__main__":
    main()
