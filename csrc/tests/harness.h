// A minimal test harness: TEST(name) registers a function, CHECK* throw on failure with the
// file and line, and main() (harness.cc) runs every test, or those whose names contain argv[1].
#pragma once

#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvdlite {
namespace testing {

struct TestCase {
  const char* name;
  std::function<void()> fn;
};
std::vector<TestCase>& registry();

struct Register {
  Register(const char* name, std::function<void()> fn) { registry().push_back({name, std::move(fn)}); }
};

class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename A, typename B>
void check_eq(const A& a, const B& b, const char* sa, const char* sb, const char* file, int line) {
  if (a == b) return;
  std::ostringstream s;
  s << file << ":" << line << ": CHECK_EQ(" << sa << ", " << sb << ") failed: " << a << " != " << b;
  throw Failure(s.str());
}

}  // namespace testing
}  // namespace hvdlite

#define HVD_CONCAT2(a, b) a##b
#define HVD_CONCAT(a, b) HVD_CONCAT2(a, b)
#define TEST(name)                                                                      \
  static void name();                                                                   \
  static ::hvdlite::testing::Register HVD_CONCAT(register_, name)(#name, &name);       \
  static void name()

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      throw ::hvdlite::testing::Failure(std::string(__FILE__) + ":" +                   \
                                        std::to_string(__LINE__) + ": CHECK(" #cond ") failed"); \
    }                                                                                   \
  } while (0)

#define CHECK_EQ(a, b) ::hvdlite::testing::check_eq((a), (b), #a, #b, __FILE__, __LINE__)

// CHECK_THROWS(statement, Status, "substring of the message")
#define CHECK_THROWS(stmt, expected_status, substring)                                  \
  do {                                                                                  \
    bool thrown_ = false;                                                               \
    try {                                                                               \
      stmt;                                                                             \
    } catch (const ::hvdlite::Error& e) {                                               \
      thrown_ = true;                                                                   \
      CHECK(e.status() == (expected_status));                                           \
      if (std::string(e.what()).find(substring) == std::string::npos) {                 \
        throw ::hvdlite::testing::Failure(std::string(__FILE__) + ":" +                 \
            std::to_string(__LINE__) + ": message '" + e.what() + "' lacks '" + (substring) + "'"); \
      }                                                                                 \
    }                                                                                   \
    CHECK(thrown_);                                                                     \
  } while (0)
