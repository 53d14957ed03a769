"""``python -m tierkeeper_operator``: run the operator without the ``tierkeeper`` console script."""

from __future__ import annotations

import argparse
import sys

from tierkeeper_operator.run import add_arguments, run, settings_from_args


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tierkeeper_operator", description=__doc__)
    add_arguments(parser)
    return run(settings_from_args(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
