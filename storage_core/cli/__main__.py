import sys

from storage_core.cli.main import main

sys.exit(main())
