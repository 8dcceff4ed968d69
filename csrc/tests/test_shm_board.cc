// The negotiation's AND through shared memory (shm_board.h): 3-8 ranks as threads over plain
// memory, many rounds of varying word counts while ranks run ahead and fall behind; every
// rank must get the AND of all packets of its round.
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "harness.h"
#include "transport/shm_board.h"

namespace hvdlite {
namespace {

// Rank r's packet of round k: mostly ones, a few bits cleared by a hash of (r, k, word).
uint64_t word_of(int r, int k, size_t i) {
  std::mt19937_64 gen(static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(k) * 7919u + i);
  return gen() | gen();
}

TEST(shm_board_ands_every_ranks_packet_round_after_round) {
  for (int ranks : {3, 5, 8}) {
    const size_t capacity = 40;
    std::vector<uint64_t> segment(ShmBoard::segment_bytes(ranks, capacity) / sizeof(uint64_t) + 8, 0);
    const int rounds = 300;
    std::vector<std::thread> threads;
    std::vector<std::string> failures(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        ShmBoard board(segment.data(), ranks, capacity, r);
        for (int k = 0; k < rounds; ++k) {
          const size_t count = 1 + static_cast<size_t>(k) % capacity;
          std::vector<uint64_t> words(count);
          for (size_t i = 0; i < count; ++i) words[i] = word_of(r, k, i);
          if (k % 37 == r) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          board.start_and(words.data(), count);
          const auto start = std::chrono::steady_clock::now();
          while (!board.test()) {
            if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
              failures[r] = "rank " + std::to_string(r) + " waited 20 s in round " + std::to_string(k);
              return;
            }
            std::this_thread::yield();
          }
          for (size_t i = 0; i < count; ++i) {
            uint64_t want = ~uint64_t(0);
            for (int p = 0; p < ranks; ++p) want &= word_of(p, k, i);
            if (words[i] != want) {
              failures[r] = "rank " + std::to_string(r) + " of " + std::to_string(ranks) + ", round " +
                            std::to_string(k) + ", word " + std::to_string(i) + ": wrong AND";
              return;
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const std::string& f : failures) {
      if (!f.empty()) throw testing::Failure(f);
    }
  }
}

// Gather rounds (start_gather) mixed with AND rounds: every rank reads every rank's packet
// of the round, intact while the others (a rank a round ahead among them) go on.
TEST(shm_board_gathers_every_ranks_packet_between_and_rounds) {
  for (int ranks : {3, 4, 8}) {
    const size_t capacity = 40;
    std::vector<uint64_t> segment(ShmBoard::segment_bytes(ranks, capacity) / sizeof(uint64_t) + 8, 0);
    const int rounds = 300;
    std::vector<std::thread> threads;
    std::vector<std::string> failures(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        ShmBoard board(segment.data(), ranks, capacity, r);
        for (int k = 0; k < rounds; ++k) {
          const size_t count = 1 + static_cast<size_t>(k) % capacity;
          std::vector<uint64_t> words(count);
          for (size_t i = 0; i < count; ++i) words[i] = word_of(r, k, i);
          if (k % 29 == r) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          const bool gather = k % 3 != 0;
          if (gather) board.start_gather(words.data(), count);
          else board.start_and(words.data(), count);
          const auto start = std::chrono::steady_clock::now();
          while (!board.test()) {
            if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
              failures[r] = "rank " + std::to_string(r) + " waited 20 s in round " + std::to_string(k);
              return;
            }
            std::this_thread::yield();
          }
          // Let a peer run ahead into the next round before reading this one's packets.
          if (k % 31 == r) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          for (size_t i = 0; i < count; ++i) {
            uint64_t want = ~uint64_t(0);
            for (int p = 0; p < ranks; ++p) {
              want &= word_of(p, k, i);
              if (gather && board.packet(p)[i] != word_of(p, k, i)) {
                failures[r] = "rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                              ", round " + std::to_string(k) + ": rank " + std::to_string(p) +
                              "'s packet word " + std::to_string(i) + " wrong";
                return;
              }
            }
            if (!gather && words[i] != want) {
              failures[r] = "rank " + std::to_string(r) + ", round " + std::to_string(k) + ": wrong AND";
              return;
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const std::string& f : failures) {
      if (!f.empty()) throw testing::Failure(f);
    }
  }
}

}  // namespace
}  // namespace hvdlite
