// Two extension modules in one process (the fork's _XLAC.so and torch_xla_ext's _ext.so), both
// dlopen'ed RTLD_LOCAL as Python imports them: does _ext see what the fork's hooks recorded?
//   argv[1] == "static": each module links its own copy of cc/ -> two ledgers, two all-reduce
//                        logs; _ext sees nothing and cannot enable the fork's hooks.
//   argv[1] == "shared": both link one shared copy of cc/ -> one ledger, one log.
// (Loading the fork's module RTLD_GLOBAL instead makes _ext's references bind to the fork's
// copy, but that is an ODR violation: --config=asan reports it for internal::hooks_enabled.)
// docs/FORK.md ("One copy of the hook state per process") explains the consequences.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

template <typename F>
F Sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (!p) {
    std::fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}

int Fail(const char* what, long got, long want) {
  std::fprintf(stderr, "%s: got %ld, want %ld\n", what, got, want);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "static") && std::strcmp(argv[1], "shared"))) {
    std::fprintf(stderr, "usage: %s static|shared\n", argv[0]);
    return 2;
  }
  const bool shared = std::strcmp(argv[1], "shared") == 0;
  const std::string suffix = std::string("_") + argv[1] + ".so";
  void* fork_lib = dlopen(("examples/fork/libfork_xlac_standin" + suffix).c_str(), RTLD_NOW | RTLD_LOCAL);
  void* ext_lib = dlopen(("examples/fork/libext_standin" + suffix).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!fork_lib || !ext_lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto run_bridge = Sym<int (*)()>(fork_lib, "fork_run_fallback_and_graph");
  auto lower_all_reduce = Sym<int (*)()>(fork_lib, "fork_compile_all_reduce");
  auto set_enabled = Sym<void (*)(int)>(ext_lib, "ext_set_hooks_enabled");
  auto fallback_ops = Sym<long (*)()>(ext_lib, "ext_fallback_op_count");
  auto all_reduces = Sym<long (*)()>(ext_lib, "ext_recorded_all_reduces");
  if (!run_bridge || !lower_all_reduce || !set_enabled || !fallback_ops || !all_reduces) return 1;

  set_enabled(1);  // graph_breaks.account() entering its region
  if (run_bridge() || lower_all_reduce()) return Fail("fork entry point failed", 1, 0);
  set_enabled(0);
  const long want = shared ? 1 : 0;
  if (fallback_ops() != want) return Fail("fallback_op events _ext sees", fallback_ops(), want);
  if (all_reduces() != want) return Fail("all-reduce calls _ext sees", all_reduces(), want);
  std::printf("%s: _ext sees %ld fallback op and %ld all-reduce recorded by the fork\n", argv[1], fallback_ops(),
              all_reduces());
  return 0;
}
