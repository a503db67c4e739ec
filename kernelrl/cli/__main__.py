import sys

from kernelrl.cli import main

sys.exit(main())
