#include "cc/common/status.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace txe {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  TXE_ASSIGN_OR_RETURN(int h, Half(x));
  TXE_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckQuarter(int x) {
  TXE_RETURN_IF_ERROR(Quarter(x).status());
  return OkStatus();
}

TEST(StatusTest, OkAndError) {
  EXPECT_TRUE(OkStatus().ok());
  Status s = NotFoundError("manifest.json");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: manifest.json");
}

TEST(StatusTest, MacrosPropagateFirstError) {
  EXPECT_EQ(*Quarter(12), 3);
  StatusOr<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(CheckQuarter(8).ok());
  EXPECT_EQ(CheckQuarter(2).code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, OkStatusIsNotAValue) {
  StatusOr<int> r = OkStatus();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, MoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(StatusDeathTest, ValueOfAnErrorAbortsWithTheStatus) {
  StatusOr<std::string> r = NotFoundError("manifest.json");
  EXPECT_DEATH((void)r.value(), "StatusOr::value\\(\\) called on an error: NOT_FOUND: manifest.json");
  EXPECT_DEATH((void)r->size(), "NOT_FOUND: manifest.json");
  EXPECT_DEATH((void)std::move(r).value(), "NOT_FOUND");
}

}  // namespace
}  // namespace txe
