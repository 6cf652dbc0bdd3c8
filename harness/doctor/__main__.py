"""`python -m harness.doctor`."""
import sys

from harness.doctor import main

sys.exit(main())
