// The handle table's watched handles (Note [watched handles] in engine/handle.h): each comes
// back once, in the order the requests finished; one that finished, or was waited for, before
// it was watched comes back at once; wait() still returns its outcome afterwards.
#include <thread>

#include "engine/handle.h"
#include "harness.h"

namespace hvdlite {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point in_ms(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

TEST(watched_handles_come_back_once_in_the_order_they_finished) {
  HandleTable table;
  const int64_t a = table.create(), b = table.create(), c = table.create(), unwatched = table.create();
  table.watch(a);
  table.watch(b);
  table.watch(c);
  CHECK(!table.next_watched(in_ms(20)));  // nothing finished yet
  table.complete(unwatched, Outcome{});
  table.complete(c, Outcome{Status::Internal, "c failed"});
  table.complete(a, Outcome{});
  CHECK(table.next_watched(in_ms(1000)) == c);
  CHECK(table.next_watched(in_ms(1000)) == a);
  CHECK(!table.next_watched(in_ms(20)));   // `unwatched` never comes back
  CHECK(table.wait(c).error == "c failed");  // the outcome stays for wait()
  table.complete(b, Outcome{});
  CHECK(table.next_watched(in_ms(1000)) == b);
  CHECK(!table.next_watched(in_ms(20)));
}

TEST(a_handle_finished_or_waited_for_before_it_is_watched_comes_back_at_once) {
  HandleTable table;
  const int64_t done = table.create(), waited = table.create();
  table.complete(done, Outcome{});
  table.complete(waited, Outcome{});
  table.wait(waited);  // gone from the table
  table.watch(done);
  table.watch(waited);
  CHECK(table.next_watched(in_ms(1000)) == done);
  CHECK(table.next_watched(in_ms(1000)) == waited);
  CHECK(table.wait(done).status == Status::Success);
}

TEST(a_thread_waiting_for_the_next_watched_handle_wakes_when_it_finishes) {
  HandleTable table;
  const int64_t h = table.create();
  table.watch(h);
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    table.complete(h, Outcome{});
  });
  const auto start = Clock::now();
  CHECK(table.next_watched(in_ms(5000)) == h);
  CHECK(Clock::now() - start < std::chrono::seconds(4));
  completer.join();
}

// A span's deadline (deadline.h) is fixed when first asked for: a finished handle is taken at
// once (nothing asks), an unfinished one is waited for about the span from then, and a
// recycled map node serves the next handle (Note [recycled map nodes]).
TEST(a_span_deadline_counts_from_the_first_ask) {
  Deadline d = Deadline::after(std::chrono::milliseconds(50));
  const auto before = Clock::now();
  const auto when = d.when();
  CHECK(when >= before + std::chrono::milliseconds(50));
  CHECK(d.when() == when);  // fixed
  CHECK(!d.is_never());
  CHECK(Deadline::never().is_never());

  HandleTable table;
  const int64_t done = table.create(), pending = table.create();
  table.complete(done, Outcome{Status::Internal, "finished"});
  CHECK(table.wait_until(done, Deadline::after(std::chrono::hours(1)))->error == "finished");
  const auto start = Clock::now();
  CHECK(!table.wait_until(pending, Deadline::after(std::chrono::milliseconds(30))));
  CHECK(Clock::now() - start >= std::chrono::milliseconds(30));
  table.complete(pending, Outcome{});
  CHECK(table.wait_until(pending, Deadline::after(std::chrono::milliseconds(0)))->status == Status::Success);
  const int64_t next = table.create();  // into a recycled node
  CHECK(next > pending);
  CHECK_EQ(table.owner(next), 0);
  CHECK(!table.poll(next));
}

}  // namespace
}  // namespace hvdlite
