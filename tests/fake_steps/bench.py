"""Fake bench step for flow tests: `python -m tests.fake_steps.bench --recipe R --run NAME --manifest-out F`."""

import sys

from tests.fake_steps._fake import main

if __name__ == "__main__":
    sys.exit(main("bench"))
