"""Entry point of every txe_py_test: runs pytest on the file Bazel passes, JUnit XML to Bazel."""

import os
import sys

import pytest


def main() -> int:
    args = ["-p", "no:cacheprovider", "-ra", "-q"]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    return pytest.main(args + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
