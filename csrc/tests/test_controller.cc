// Negotiation over the loopback transport: every rank gets the same responses in the same
// order whatever order it submitted in; the response cache assigns the same slots everywhere,
// serves repeats without the coordinator, and drops a response on every rank when one rank's
// request no longer matches it.
#include <map>

#include "engine/controller.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

std::unique_ptr<TensorEntry> entry(const std::string& name, std::vector<int64_t> shape) {
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.shape = std::move(shape);
  return e;
}

struct Seen {
  std::vector<std::string> order;     // responses, in the order received ("!" marks an error)
  std::map<std::string, int> slots;   // cache slot each entry was served from (-1: coordinator)
};

// Negotiates until every entry has its response. All ranks hold the same names, so they
// finish in the same round.
void negotiate_all(Controller& c, EntryList& pending, Seen& seen) {
  while (!pending.empty()) {
    RoundOutcome round = c.negotiate(pending, false);
    CHECK(!round.shutdown);
    for (const Response& r : round.responses) {
      seen.order.push_back(r.name + (r.ok() ? "" : "!"));
      for (auto& e : pending) {
        if (e->request.name == r.name) {
          e->done = true;
          seen.slots[r.name] = e->state == TensorEntry::State::CacheHit ? e->cache_id : -1;
        }
      }
    }
    EntryList still;
    for (auto& e : pending) {
      if (!e->done) still.push_back(std::move(e));
    }
    pending.swap(still);
  }
}

TEST(controller_ranks_agree_and_cache_repeats) {
  for (int n : {1, 2, 3, 5}) {
    Fabric fabric(n);
    Config config;
    std::vector<Seen> first(n), second(n), third(n);
    run_ranks(n, [&](int r) {
      auto t = fabric.world(r);
      Membership members;
      Controller c(*t, config, members);
      c.check_settings_agree();
      const std::vector<std::string> names = {"a", "b", "c", "d", "e"};
      auto submit = [&](int rotate, int64_t c_rows) {
        EntryList pending;
        for (size_t i = 0; i < names.size(); ++i) {
          const std::string& name = names[(i + rotate) % names.size()];
          pending.push_back(entry(name, {name == "c" ? c_rows : 4}));
          pending.back()->request.rank = r;
        }
        return pending;
      };
      EntryList pending = submit(r, 4);  // each rank in its own order
      negotiate_all(c, pending, first[r]);
      pending = submit(2 * r + 1, 4);    // repeats: served from the cache
      negotiate_all(c, pending, second[r]);
      pending = submit(0, r == n - 1 ? 5 : 4);  // the last rank changes "c"
      negotiate_all(c, pending, third[r]);
    });
    for (int r = 0; r < n; ++r) {
      CHECK(first[r].order == first[0].order);
      CHECK(second[r].order == second[0].order);
      CHECK(third[r].order == third[0].order);
      CHECK(second[r].slots == second[0].slots);
      for (const auto& kv : first[r].slots) CHECK_EQ(kv.second, -1);   // new: the coordinator
      for (const auto& kv : second[r].slots) CHECK(kv.second >= 0);    // repeats: the cache
      CHECK_EQ(third[r].slots.at("c"), -1);  // invalidated everywhere, decided afresh
    }
    CHECK_EQ(first[0].order.size(), size_t(5));
    // "c" differs in shape on one rank (a mismatch error everywhere) unless it is alone.
    bool c_failed = false;
    for (const auto& s : third[0].order) c_failed = c_failed || s == "c!";
    CHECK_EQ(c_failed, n > 1);
  }
}

TEST(controller_refuses_settings_that_differ) {
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    auto t = fabric.world(r);
    Config config;
    if (r == 1) config.fusion_threshold = 1234;
    Membership members;
    Controller c(*t, config, members);
    CHECK_THROWS(c.check_settings_agree(), Status::InvalidArgument, "HVDLITE_FUSION_THRESHOLD differs");
  });
}

}  // namespace
}  // namespace hvdlite
