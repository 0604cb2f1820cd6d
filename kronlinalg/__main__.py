"""The ``kronlinalg`` command (also ``python -m kronlinalg``): ``kronlinalg demo`` runs the main
job, on the GPU when there is one."""

import argparse
import sys

from . import demo


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kronlinalg")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="Gaussian-process regression on a grid with a Kronecker-structured kernel")
    demo.add_arguments(d)
    args = parser.parse_args(argv)
    return demo.run(args)


if __name__ == "__main__":
    sys.exit(main())
