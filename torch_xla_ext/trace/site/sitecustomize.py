"""Python imports this module at start-up (``site`` imports ``sitecustomize``) in every process
whose PYTHONPATH has this directory first: ``torch-xla-ext trace`` puts it there for the command
it runs, and every Python process that command starts inherits it (torchrun's ranks,
multiprocessing's spawned children, subprocesses, other virtual environments).

It first imports the ``sitecustomize`` it hides, if there is one further down ``sys.path``, as
Python would have (an error there is reported the way ``site`` reports it, and start-up goes on).
Then, with ``TORCH_XLA_EXT_TRACE`` set, it starts the recorder
(:mod:`torch_xla_ext.trace.startup`); torch_xla_ext is found at ``TORCH_XLA_EXT_TRACE_PACKAGE`` when
the interpreter does not have it. Nothing here imports torch, and nothing here raises.
"""

import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError as e:
            if e.name != "sitecustomize":
                raise
    except Exception as e:  # noqa: BLE001 - what site.py does with a failing sitecustomize
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _start() -> None:
    if not os.environ.get("TORCH_XLA_EXT_TRACE"):
        return
    try:
        import importlib.util

        package = os.environ.get("TORCH_XLA_EXT_TRACE_PACKAGE")
        if package:
            spec = importlib.util.find_spec("torch_xla_ext")
            if spec is None or os.path.dirname(os.path.dirname(os.path.abspath(spec.origin or ""))) != \
                    os.path.abspath(package):
                sys.meta_path.insert(0, _OurPackage(package))
        # Only with TORCH_XLA_EXT_TRACE set, and after the finder above can find the package.
        from torch_xla_ext.trace import startup
    except Exception as e:  # noqa: BLE001 - the user's program starts whatever happens to the recorder; the report reads this file
        try:
            d = os.environ["TORCH_XLA_EXT_TRACE"]
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"startup-error-{os.getpid()}.txt"), "a") as f:
                f.write(f"torch_xla_ext not importable here: {type(e).__name__}: {e}\n")
        except OSError:  # a directory that cannot be written: nothing is left to tell
            pass
        return
    startup.autostart()


class _OurPackage:
    """Finds torch_xla_ext (the top-level package only) where the trace command lives."""

    def __init__(self, parent: str):
        self._parent = parent

    def find_spec(self, name, path=None, target=None):
        if name != "torch_xla_ext":
            return None
        import importlib.machinery

        return importlib.machinery.PathFinder.find_spec(name, [self._parent])


_chain()
_start()
