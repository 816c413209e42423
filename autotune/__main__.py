"""``python -m autotune`` runs the command line."""
import sys

from autotune.cli import main

sys.exit(main())
