// docs/FORK.md quotes examples/fork/fork_lowering.cc: every `// [FORK.md <name>]` ... `// [end]`
// region must appear verbatim in a ```cpp block of the page, so the guide cannot drift from the
// code that fork_test exercises.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Region {
  std::string name;
  std::string text;
};

std::vector<Region> MarkedRegions(const std::string& src) {
  std::vector<Region> out;
  const std::string open = "// [FORK.md ", close = "\n// [end]";
  for (size_t pos = src.find(open); pos != std::string::npos; pos = src.find(open, pos)) {
    const size_t name_end = src.find("]\n", pos);
    const size_t body = name_end + 2;
    const size_t end = src.find(close, body);
    if (name_end == std::string::npos || end == std::string::npos) break;
    out.push_back({src.substr(pos + open.size(), name_end - pos - open.size()), src.substr(body, end - body)});
    pos = end;
  }
  return out;
}

TEST(DocSyncTest, ForkGuideQuotesTheExampleVerbatim) {
  const std::string src = ReadFile("examples/fork/fork_lowering.cc");
  const std::string doc = ReadFile("docs/FORK.md");
  ASSERT_FALSE(src.empty());
  ASSERT_FALSE(doc.empty()) << "docs/FORK.md not in the runfiles";
  std::vector<Region> regions = MarkedRegions(src);
  std::vector<std::string> names;
  for (const Region& r : regions) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"all-reduce", "compile", "execute", "replicate-sharded-data",
                                             "cpu-fallback", "call_jax"}));
  for (const Region& r : regions) {
    EXPECT_NE(doc.find("```cpp\n" + r.text + "\n```"), std::string::npos)
        << "docs/FORK.md does not quote region '" << r.name << "' of fork_lowering.cc verbatim";
  }
  // The tests the page names exist here.
  for (const char* t : {"shared_state_static_test", "shared_state_shared_test", "fork_test", "doc_sync_test"}) {
    EXPECT_NE(doc.find(t), std::string::npos) << t;
  }
}

}  // namespace
