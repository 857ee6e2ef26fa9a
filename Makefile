# Quick start: `make example` (set up, then the main job on the embedded example) and
# `make test` (set up, then every component's C++ and Python tests: the first tier, `bazel test
# //... --test_tag_filters=-tier2`). `make test-all` adds the second tier (targets tagged tier2:
# the zoo and stability sweeps, other stacks' and CPythons' venvs, fresh-venv installs, the wheels
# of every CPython); CI (.ci/run) runs it but the targets also tagged breadth.
SHELL := /bin/bash
PY := .venv/bin/python
EXT_SUFFIX = $$($(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')

.PHONY: setup develop example test test-all wheel wheels bench stubs help

setup:
	@python/setup_env.sh

# Builds the extension with Bazel and puts it next to the sources, so `.venv/bin/python -m
# torch_xla_ext` and plain pytest work from the checkout.
develop: setup
	@bazel build $(if $(CI),--config=ci) //torch_xla_ext:_ext.so //torch_xla_ext:libtxe_hooks //torch_xla_ext:libprotobuf //torch_xla_ext:libtxe_xla_proto
	@install -m 755 bazel-bin/torch_xla_ext/libtxe_xla_proto.so torch_xla_ext/libtxe_xla_proto.so
	@install -m 755 bazel-bin/torch_xla_ext/libtxe_hooks.so torch_xla_ext/libtxe_hooks.so
	@install -m 755 bazel-bin/torch_xla_ext/libprotobuf.so.* torch_xla_ext/
	@install -m 755 bazel-bin/torch_xla_ext/_ext.so torch_xla_ext/_ext$(EXT_SUFFIX)

example: develop
	@PJRT_DEVICE=$${PJRT_DEVICE:-CPU} $(PY) -m torch_xla_ext doctor --out doctor-report

test: setup
	@python/run_tests.sh

test-all: setup
	@python/run_tests.sh --all

wheel: setup
	@$(PY) -m pip wheel --no-deps . -w dist/

# One wheel per CPython of bazel/python_configure.bzl's WHEEL_PYTHONS (3.10-3.13), each extension
# built against that interpreter's headers (found as $$TXE_PYTHON_3_12, pyenv's, or python3.12 on
# PATH), into dist/.
wheels: setup
	@bazel build $(if $(CI),--config=ci) //python:wheels
	@mkdir -p dist && for w in bazel-bin/python/wheel*/torch_xla_ext-*.whl; do install -m 644 "$$w" dist/ && echo "dist/$$(basename $$w)"; done

bench: develop
	@for b in bench/*_bench.py; do PYTHONPATH=$(CURDIR) PJRT_DEVICE=$${PJRT_DEVICE:-CPU} $(PY) $$b || exit 1; done

# The type stubs of the extension module (torch_xla_ext/_ext/*.pyi, pybind11-stubgen), regenerated
# from the built module after a binding changes; tests/packaging/stubs_test.py fails until the
# checked-in stubs match.
stubs: develop
	@$(PY) python/generate_stubs.py

help:
	@echo "make setup     apt packages if missing, the pinned venv (~/.cache/torch_xla_ext, linked as .venv), torch-xla-ext in it"
	@echo "make develop   the C++ extension built and placed in the source tree (pytest and torch-xla-ext from the checkout)"
	@echo "make example   set up, then the doctor on the embedded example (doctor-report/)"
	@echo "make test      set up, then the first tier: every component's tests (bazel test //... --test_tag_filters=-tier2)"
	@echo "make test-all  set up, then both tiers: also the zoo and stability sweeps, other stacks' and CPythons' venvs (CI: but breadth)"
	@echo "make wheel     the wheel of the venv's CPython in dist/ (pip wheel .); make wheels: one per CPython 3.10-3.13"
	@echo "make bench     bench/*_bench.py (ratios against an anchor measured in the same run)"
	@echo "make stubs     regenerate the extension's type stubs"
