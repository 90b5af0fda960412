import sys

from quotaguard.cli import main

sys.exit(main())
