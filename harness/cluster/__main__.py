"""`python -m harness.cluster`."""
import sys

from harness.cluster import main

sys.exit(main())
