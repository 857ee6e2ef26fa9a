"""Entry point of every txe_py_test: runs pytest on the file Bazel passes, JUnit XML to Bazel.

The configuration is bazel/pytest.ini and the root is the runfiles tree, both named explicitly:
left to itself pytest searches the test's parent directories for a configuration, and outside the
sandbox those reach the execroot, whose symlinks lead to the checkout's pyproject.toml."""

import os
import sys

import pytest


def _runfiles_root() -> str:
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    if srcdir and workspace:
        return os.path.join(srcdir, workspace)
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    root = _runfiles_root()
    args = ["-c", os.path.join(root, "bazel", "pytest.ini"), f"--rootdir={root}",
            "-p", "no:cacheprovider", "-ra", "-q"]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    return pytest.main(args + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
