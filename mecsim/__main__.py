import sys

from mecsim.cli import main

sys.exit(main())
