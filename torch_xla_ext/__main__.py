import sys

from torch_xla_ext.cli import main

sys.exit(main())
