"""``python -m fairlane``: the same as the ``fairlane`` command."""

from fairlane.cli import main

main()
