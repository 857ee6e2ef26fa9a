"""Offline stand-in for @rules_cc, which Bazel 4.2.3 would otherwise download.

Each symbol forwards to the native rule; this is all Bazel 4.2.3's own tools load from it.
"""

def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)
