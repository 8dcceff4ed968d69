#include "harness.h"

#include <chrono>
#include <cstdio>
#include <exception>

namespace hvdlite {
namespace testing {

std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

}  // namespace testing
}  // namespace hvdlite

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  int passed = 0, failed = 0;
  for (const auto& t : hvdlite::testing::registry()) {
    if (std::string(t.name).find(filter) == std::string::npos) continue;
    const auto start = std::chrono::steady_clock::now();
    try {
      t.fn();
      ++passed;
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("PASS %s (%.0f ms)\n", t.name, ms);
    } catch (const std::exception& e) {
      ++failed;
      std::printf("FAIL %s: %s\n", t.name, e.what());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
