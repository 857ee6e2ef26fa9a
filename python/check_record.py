"""Exit 0 when the installed files of a distribution are its own: each `.py` file its RECORD
lists under the distribution's top-level packages has the hash the RECORD gives. Exit 1 otherwise,
naming the first file that differs (another distribution wrote over it).

    python python/check_record.py torchax
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import sys


def first_foreign_file(name: str) -> str | None:
    """The first file of `name` whose content is not what its RECORD says, or None."""
    dist = importlib.metadata.distribution(name)
    for f in dist.files or ():
        if f.hash is None or not str(f).endswith(".py"):
            continue
        digest = hashlib.new(f.hash.mode, f.locate().read_bytes()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            return str(f)
    return None


def main(argv: list[str]) -> int:
    for name in argv:
        try:
            foreign = first_foreign_file(name)
        except (importlib.metadata.PackageNotFoundError, FileNotFoundError) as e:
            print(f"check_record: {name}: {e}", file=sys.stderr)
            return 1
        if foreign is not None:
            print(f"check_record: {name}: {foreign} is not the file its RECORD lists", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
