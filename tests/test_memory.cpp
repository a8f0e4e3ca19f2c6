// Memory: exact byte counts of the tracking adaptor (current, peak, total, counts, scopes, live list,
// history, events, reserve/commit/release), the limiting adaptor's out_of_memory, host alignment,
// Storage ownership, errors, and backend selection by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <layerinit/core/bytes.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/config.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/caller_queue.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/memory/recycling.hpp>
#include <layerinit/memory/resource.hpp>
#include <layerinit/memory/tensor.hpp>
#include <layerinit/memory/tracking.hpp>

#include "simulated_node.hpp"

using namespace layerinit;

namespace {

void expect_stats(const MemoryStats& s, std::size_t cur, std::size_t peak, std::size_t total, std::size_t n_cur,
                  std::size_t n_peak, std::size_t n_total, const char* where) {
  EXPECT_EQ(s.current_bytes, cur) << where;
  EXPECT_EQ(s.peak_bytes, peak) << where;
  EXPECT_EQ(s.total_bytes, total) << where;
  EXPECT_EQ(s.current_count, n_cur) << where;
  EXPECT_EQ(s.peak_count, n_peak) << where;
  EXPECT_EQ(s.total_count, n_total) << where;
}

// An upstream whose reservations always come back at the same address (as mmap may do after a
// munmap), backed by a static buffer; allocations from the heap.
class fixed_address_resource final : public memory_resource {
 public:
  alignas(64) static inline unsigned char arena[1 << 16];

 private:
  void* do_allocate(std::size_t bytes, const AllocTag&) override { return ::operator new(bytes); }
  void do_deallocate(void* p, std::size_t) noexcept override { ::operator delete(p); }
  MemoryKind do_kind() const noexcept override { return MemoryKind::host; }
  std::string do_name() const override { return "fixed"; }
  bool do_supports_reserve() const noexcept override { return true; }
  void* do_reserve(std::size_t, const AllocTag&) override { return arena; }
  void do_commit(void*, std::size_t, std::size_t) override {}
  void do_release(void*, std::size_t) noexcept override {}
};

}  // namespace

TEST(Tracking, ExactCountsThroughASequence) {
  host_resource host;
  tracking_resource tr(host);
  expect_stats(tr.stats(), 0, 0, 0, 0, 0, 0, "start");
  void* a = tr.allocate(100);
  void* b = tr.allocate(200);
  expect_stats(tr.stats(), 300, 300, 300, 2, 2, 2, "after a, b");
  tr.deallocate(a, 100);
  expect_stats(tr.stats(), 200, 300, 300, 1, 2, 2, "after freeing a");
  void* c = tr.allocate(50);
  expect_stats(tr.stats(), 250, 300, 350, 2, 2, 3, "after c");
  void* d = tr.allocate(1000);
  expect_stats(tr.stats(), 1250, 1250, 1350, 3, 3, 4, "after d");
  tr.deallocate(d, 1000);
  tr.deallocate(b, 200);
  expect_stats(tr.stats(), 50, 1250, 1350, 1, 3, 4, "after freeing d, b");
  tr.reset_peak();
  expect_stats(tr.stats(), 50, 50, 1350, 1, 1, 4, "after reset_peak");
  void* e = tr.allocate(10);
  expect_stats(tr.stats(), 60, 60, 1360, 2, 2, 5, "after e");
  tr.deallocate(e, 10);
  tr.deallocate(c, 50);
  expect_stats(tr.stats(), 0, 60, 1360, 0, 2, 5, "end");
  EXPECT_EQ(host.in_use(), 0u);
  EXPECT_EQ(tr.name(), "host");
  EXPECT_EQ(tr.kind(), MemoryKind::host);
}

TEST(Tracking, NestedScopes) {
  host_resource host;
  tracking_resource tr(host);
  void* x = tr.allocate(100);
  tr.push_scope();
  void* a = tr.allocate(200);
  tr.push_scope();
  void* b = tr.allocate(300);
  tr.deallocate(b, 300);
  // Inner phase: 300 allocated and freed on top of 300 in use.
  expect_stats(tr.pop_scope(), 300, 600, 300, 2, 3, 1, "inner scope");
  void* c = tr.allocate(50);
  expect_stats(tr.pop_scope(), 350, 600, 550, 3, 3, 3, "outer scope");
  expect_stats(tr.stats(), 350, 600, 650, 3, 3, 4, "global");
  tr.push_scope();
  tr.deallocate(a, 200);
  expect_stats(tr.pop_scope(), 150, 350, 0, 2, 3, 0, "scope that only frees");
  tr.deallocate(c, 50);
  tr.deallocate(x, 100);
  EXPECT_THROW(tr.pop_scope(), std::logic_error);
}

TEST(Tracking, LiveListAndHistoryKeepTags) {
  host_resource host;
  tracking_resource tr(host, {.live_list = true, .history = true});
  void* a = tr.allocate(64, {"model.layers.0.mlp.up_proj.weight", DType::bf16});
  void* b = tr.allocate(32, {"scratch", std::nullopt});
  auto live = tr.live();
  ASSERT_EQ(live.size(), 2u);
  std::sort(live.begin(), live.end(), [](auto& l, auto& r) { return l.bytes > r.bytes; });
  EXPECT_EQ(live[0].ptr, a);
  EXPECT_EQ(live[0].bytes, 64u);
  EXPECT_EQ(live[0].tag.label, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(live[0].tag.dtype, DType::bf16);
  EXPECT_FALSE(live[0].reservation);
  EXPECT_EQ(live[1].tag.label, "scratch");
  EXPECT_FALSE(live[1].tag.dtype.has_value());
  tr.deallocate(a, 64);
  live = tr.live();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].ptr, b);
  tr.deallocate(b, 32);
  EXPECT_TRUE(tr.live().empty());
  const auto h = tr.history();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].tag.label, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(h[0].bytes, 64u);
  EXPECT_EQ(h[1].tag.label, "scratch");
  EXPECT_EQ(h[1].bytes, 32u);
  // Without the options, neither list is kept.
  tracking_resource plain(host);
  void* p = plain.allocate(8, {"x", {}});
  EXPECT_TRUE(plain.live().empty());
  EXPECT_TRUE(plain.history().empty());
  plain.deallocate(p, 8);
}

TEST(Tracking, ListenerSeesEveryChange) {
  host_resource host;
  tracking_resource tr(host, {.live_list = true});
  struct Seen {
    MemoryEvent::Kind kind;
    std::size_t bytes, current;
    double seconds;
    std::string label;
  };
  std::vector<Seen> seen;
  tr.set_listener([&](const MemoryEvent& e) {
    seen.push_back({e.kind, e.bytes, e.current_bytes, e.seconds, e.tag ? e.tag->label : "<none>"});
  });
  void* a = tr.allocate(100, {"a", {}});
  void* b = tr.allocate(28, {"b", {}});
  tr.deallocate(a, 100);
  void* r = tr.reserve(1 << 16, {"stack", {}});
  tr.commit(r, 0, 4096);
  tr.commit(r, 8192, 1000);
  tr.release(r, 1 << 16);
  tr.deallocate(b, 28);
  using K = MemoryEvent::Kind;
  const std::vector<std::tuple<K, std::size_t, std::size_t, std::string>> want = {
      {K::allocate, 100, 100, "a"},   {K::allocate, 28, 128, "b"},      {K::deallocate, 100, 28, "a"},
      {K::commit, 4096, 4124, "stack"}, {K::commit, 1000, 5124, "stack"}, {K::release, 5096, 28, "stack"},
      {K::deallocate, 28, 0, "b"}};
  ASSERT_EQ(seen.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(seen[i].kind, std::get<0>(want[i])) << "event " << i;
    EXPECT_EQ(seen[i].bytes, std::get<1>(want[i])) << "event " << i;
    EXPECT_EQ(seen[i].current, std::get<2>(want[i])) << "event " << i;
    EXPECT_EQ(seen[i].label, std::get<3>(want[i])) << "event " << i;
    if (i) EXPECT_GE(seen[i].seconds, seen[i - 1].seconds);
  }
  tr.set_listener(nullptr);
  tr.deallocate(tr.allocate(1), 1);
  EXPECT_EQ(seen.size(), want.size());
}

TEST(Tracking, ReserveCommitReleaseCountCommittedBytes) {
  host_resource host;
  tracking_resource tr(host, {.history = true});
  ASSERT_TRUE(tr.supports_reserve());
  const std::size_t reserved = 1 << 20;
  void* p = tr.reserve(reserved, {"stack", DType::f16});
  expect_stats(tr.stats(), 0, 0, 0, 1, 1, 1, "reserved");
  tr.commit(p, 0, 4096);
  std::memset(p, 1, 4096);  // committed memory is usable
  tr.commit(p, 65536, 100);
  static_cast<char*>(p)[65536 + 99] = 7;
  expect_stats(tr.stats(), 4196, 4196, 4196, 1, 1, 1, "committed");
  auto live = tr.live();  // reservations are listed even without options.live_list
  ASSERT_EQ(live.size(), 1u);
  EXPECT_TRUE(live[0].reservation);
  EXPECT_EQ(live[0].bytes, 4196u);
  EXPECT_EQ(live[0].tag.label, "stack");
  void* a = tr.allocate(1000);
  expect_stats(tr.stats(), 5196, 5196, 5196, 2, 2, 2, "plus an allocation");
  tr.release(p, reserved);
  expect_stats(tr.stats(), 1000, 5196, 5196, 1, 2, 2, "released");
  tr.deallocate(a, 1000);
  const auto h = tr.history();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_TRUE(h[0].reservation);
  EXPECT_EQ(h[0].bytes, 4196u);
  EXPECT_EQ(h[1].bytes, 1000u);
}

// A reservation that reuses the address of a released one: the history keeps each one's own bytes.
TEST(Tracking, HistoryOfReservationsAtAReusedAddress) {
  fixed_address_resource up;
  tracking_resource tr(up, {.history = true});
  void* p = tr.reserve(4096, {"first", {}});
  tr.commit(p, 0, 100);
  tr.release(p, 4096);
  void* q = tr.reserve(4096, {"second", {}});
  ASSERT_EQ(p, q);
  tr.commit(q, 0, 300);
  tr.commit(q, 300, 200);
  const auto h = tr.history();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].tag.label, "first");
  EXPECT_EQ(h[0].bytes, 100u);
  EXPECT_EQ(h[1].tag.label, "second");
  EXPECT_EQ(h[1].bytes, 500u);
  tr.release(q, 4096);
  expect_stats(tr.stats(), 0, 500, 600, 0, 1, 2, "end");
}

TEST(Limiting, ThrowsExactOutOfMemoryAndLeavesCountsUnchanged) {
  host_resource host;
  limiting_resource lim(host, 1000);
  tracking_resource tr(lim);
  EXPECT_EQ(lim.limit(), 1000u);
  void* a = tr.allocate(600);
  try {
    tr.allocate(500);
    ADD_FAILURE() << "allocation past the limit succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), 500u);
    EXPECT_EQ(e.in_use(), 600u);
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("limit 1000 bytes"), std::string::npos) << m;
  }
  EXPECT_EQ(lim.in_use(), 600u);
  EXPECT_EQ(host.in_use(), 600u);
  expect_stats(tr.stats(), 600, 600, 600, 1, 1, 1, "after the refused allocation");
  void* b = tr.allocate(400);  // exactly up to the limit
  EXPECT_EQ(lim.in_use(), 1000u);
  EXPECT_THROW(tr.allocate(1), out_of_memory);
  tr.deallocate(b, 400);
  // Commits count against the limit; reservations do not.
  ASSERT_TRUE(tr.supports_reserve());
  void* r = tr.reserve(1 << 20);
  EXPECT_EQ(lim.in_use(), 600u);
  tr.commit(r, 0, 300);
  EXPECT_EQ(lim.in_use(), 900u);
  try {
    tr.commit(r, 4096, 200);
    ADD_FAILURE() << "commit past the limit succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), 200u);
    EXPECT_EQ(e.in_use(), 900u);
  }
  EXPECT_EQ(lim.in_use(), 900u);
  expect_stats(tr.stats(), 900, 1000, 1300, 2, 2, 3, "after the refused commit");
  tr.release(r, 1 << 20);
  EXPECT_EQ(lim.in_use(), 600u);
  tr.deallocate(a, 600);
  EXPECT_EQ(lim.in_use(), 0u);
  EXPECT_EQ(host.in_use(), 0u);
}

TEST(Limiting, OutOfMemoryIsALayerinitError) {
  host_resource host;
  limiting_resource lim(host, 10);
  EXPECT_THROW(lim.allocate(11), layerinit::error);
  EXPECT_EQ(lim.in_use(), 0u);
}

TEST(HostResource, SixtyFourByteAlignmentAndCounts) {
  host_resource host;
  EXPECT_EQ(host_resource::alignment, 64u);
  EXPECT_EQ(host.kind(), MemoryKind::host);
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::size_t sum = 0;
  for (std::size_t n : {1u, 3u, 63u, 64u, 65u, 1000u, 4097u, 1u << 20}) {
    void* p = host.allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << n << " bytes";
    std::memset(p, 0xab, n);
    blocks.emplace_back(p, n);
    sum += n;
    EXPECT_EQ(host.in_use(), sum);
  }
  for (auto [p, n] : blocks) host.deallocate(p, n);
  EXPECT_EQ(host.in_use(), 0u);
}

TEST(HostResource, ResourcesWithoutReserveSaySo) {
  // The default reserve slot: unsupported, and reserve() throws naming the resource.
  class plain final : public memory_resource {
    void* do_allocate(std::size_t n, const AllocTag&) override { return ::operator new(n); }
    void do_deallocate(void* p, std::size_t) noexcept override { ::operator delete(p); }
    MemoryKind do_kind() const noexcept override { return MemoryKind::host; }
    std::string do_name() const override { return "plain"; }
  } r;
  EXPECT_FALSE(r.supports_reserve());
  EXPECT_THROW(r.reserve(100), std::logic_error);
  tracking_resource tr(r);
  EXPECT_FALSE(tr.supports_reserve());
  EXPECT_THROW(tr.reserve(100), std::logic_error);
  expect_stats(tr.stats(), 0, 0, 0, 0, 0, 0, "after a refused reserve");
}

TEST(Storage, FreesOnDestructionAndMovesOwnership) {
  host_resource host;
  tracking_resource tr(host);
  {
    Storage b = Storage::allocate(tr, 128, {"b", {}});
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), 128u);
    expect_stats(tr.stats(), 128, 128, 128, 1, 1, 1, "one allocation");
    Storage c(std::move(b));
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(b.size(), 0u);
    EXPECT_EQ(c.size(), 128u);
    Storage d = Storage::allocate(tr, 64, {});
    expect_stats(tr.stats(), 192, 192, 192, 2, 2, 2, "two allocations");
    d = std::move(c);  // d's 64 bytes are freed, d takes c's 128
    EXPECT_EQ(d.size(), 128u);
    EXPECT_EQ(c.data(), nullptr);
    expect_stats(tr.stats(), 128, 192, 192, 1, 2, 2, "after move assignment");
    Storage& self = d;
    d = std::move(self);
    EXPECT_EQ(d.size(), 128u);
    expect_stats(tr.stats(), 128, 192, 192, 1, 2, 2, "after self-move");
  }
  expect_stats(tr.stats(), 0, 192, 192, 0, 2, 2, "after scope");
  Storage r = Storage::allocate(tr, 10, {});
  r.reset();
  EXPECT_EQ(r.data(), nullptr);
  EXPECT_EQ(tr.stats().current_bytes, 0u);
  Storage none;
  EXPECT_EQ(none.data(), nullptr);
  none.reset();
}

TEST(Storage, ReservationsCommitInsideAndReleaseEverything) {
  host_resource host;
  tracking_resource tr(host);
  {
    Storage s = Storage::reserve(tr, 3 * 4096, {"r", {}});
    expect_stats(tr.stats(), 0, 0, 0, 1, 1, 1, "reserved only");
    s.commit(4096, 4096);
    static_cast<unsigned char*>(s.data())[4096] = 7;  // committed bytes are writable
    expect_stats(tr.stats(), 4096, 4096, 4096, 1, 1, 1, "one range committed");
    EXPECT_THROW(s.commit(2 * 4096, 4096 + 1), std::out_of_range);
    EXPECT_THROW(s.commit(3 * 4096 + 1, 0), std::out_of_range);
    Storage moved(std::move(s));
    EXPECT_EQ(s.data(), nullptr);
    EXPECT_EQ(moved.size(), 3u * 4096);
  }
  EXPECT_EQ(tr.stats().current_bytes, 0u);
  Storage plain = Storage::allocate(tr, 16, {});
  EXPECT_THROW(plain.commit(0, 16), std::logic_error);
}

TEST(Errors, MessagesCarryTheDetails) {
  EXPECT_EQ(format_bytes(100), "100 bytes");
  EXPECT_EQ(format_bytes(1610612736), "1.50 GiB (1610612736 bytes)");
  EXPECT_EQ(format_bytes(2048), "2.00 KiB (2048 bytes)");
  // Tables (layerinit plan) take the short form.
  EXPECT_EQ(format_bytes_short(100), "100 B");
  EXPECT_EQ(format_bytes_short(1711308800), "1.59 GiB");
  EXPECT_EQ(format_bytes_short(8192000000000ull), "7.45 TiB");
  const out_of_memory e(2048, 100, "host");
  EXPECT_STREQ(e.what(), "out of memory on host: asked for 2.00 KiB (2048 bytes) with 100 bytes in use");
  const cuda_error c("cudaMalloc(&p, n)", "out of memory", "x.cu", 12);
  EXPECT_EQ(c.call(), "cudaMalloc(&p, n)");
  EXPECT_NE(std::string(c.what()).find("x.cu:12"), std::string::npos);
}

// Misuse by a caller is layerinit::logic_error, never std::invalid_argument (bad input): the line names
// the failed expression and its place.
TEST(Errors, PreconditionsNameTheExpressionAndAreNotBadInput) {
  const int n = -1;
  try {
    LAYERINIT_EXPECTS(n >= 0, "n must be >= 0");
    ADD_FAILURE();
  } catch (const std::invalid_argument& x) {
    ADD_FAILURE() << "misuse thrown as bad input: " << x.what();
  } catch (const layerinit::logic_error& x) {
    const std::string m = x.what();
    EXPECT_EQ(m.rfind("n must be >= 0 (n >= 0 at ", 0), 0u) << m;
    EXPECT_NE(m.find("test_memory.cpp:"), std::string::npos) << m;
    EXPECT_TRUE(m.ends_with(")")) << m;
  }
  EXPECT_NO_THROW(LAYERINIT_EXPECTS(n < 0, "never built"));
  try {
    LAYERINIT_FAIL("unknown kind " + std::to_string(7));
    ADD_FAILURE();
  } catch (const layerinit::logic_error& x) {
    const std::string m = x.what();
    EXPECT_EQ(m.rfind("unknown kind 7 (at ", 0), 0u) << m;
    EXPECT_NE(m.find("test_memory.cpp:"), std::string::npos) << m;
  }
  static_assert(std::is_base_of_v<std::logic_error, layerinit::logic_error>);
  static_assert(!std::is_base_of_v<std::invalid_argument, layerinit::logic_error>);
}

TEST(Backend, SelectionByName) {
  auto cpu = make_backend("cpu", 3);
  EXPECT_EQ(cpu->kind(), BackendKind::host);
  EXPECT_EQ(cpu->describe(), "cpu (3 threads)");
  EXPECT_EQ(cpu->memory().kind(), MemoryKind::host);
  EXPECT_EQ(make_backend("host")->kind(), BackendKind::host);
  try {
    make_backend("bogus");
    ADD_FAILURE() << "make_backend(\"bogus\") did not throw";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'bogus'"), std::string::npos) << m;
    EXPECT_NE(m.find("auto, cpu, cuda"), std::string::npos) << m;
  }
  EXPECT_THROW(make_backend("cpu", -1), std::invalid_argument);
}

TEST(Backend, CudaWhenUnusableSaysWhy) {
  const CudaProbe p = cuda_probe();
#if !LAYERINIT_HAS_CUDA
  EXPECT_FALSE(p.usable);
  EXPECT_EQ(p.why, "layerinit was built without CUDA");
#endif
  if (p.usable) {
    EXPECT_EQ(make_backend("cuda")->kind(), BackendKind::cuda);
    EXPECT_EQ(make_backend("auto")->kind(), BackendKind::cuda);
    return;
  }
  EXPECT_FALSE(p.why.empty());
  try {
    make_backend("cuda");
    ADD_FAILURE() << "make_backend(\"cuda\") did not throw";
  } catch (const layerinit::error& e) {
    EXPECT_NE(std::string(e.what()).find(p.why), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_backend("auto")->kind(), BackendKind::host);
}

TEST(Backend, DeviceNamesAreTorchsAndOthersAreRefusedByName) {
  for (const char* bad : {"cuda:", "cuda:x", "cuda:01", "cuda:-1", "cuda:+1", "cuda:1x", "cuda:99999999999", "cuda: 1"}) {
    SCOPED_TRACE(bad);
    try {
      (void)choose_device(bad, "--device");
      ADD_FAILURE() << "choose_device did not throw";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("--device '" + std::string(bad) + "' is not a device", 0), 0u) << m;
    }
  }
  for (const char* unknown : {"CUDA", "gpu", "cuda0", "tpu:0"}) EXPECT_THROW((void)choose_device(unknown), std::invalid_argument) << unknown;
  EXPECT_EQ(choose_device("cpu").kind, BackendKind::host);
  EXPECT_EQ(choose_device("host").kind, BackendKind::host);
}

// A node of 4 simulated GPUs: each name reaches its own device, and every allocation and fill is asked
// of that device; an index past the node is refused before anything is allocated.
TEST(Backend, SimulatedNodeGivesEachDeviceItsOwnAllocationsAndFills) {
  const layerinit::testing::SimulatedNode node(4);
  EXPECT_EQ(cuda_device_count(), 4);
  EXPECT_TRUE(cuda_probe(3).usable);
  EXPECT_FALSE(cuda_probe(4).usable);
  EXPECT_EQ(choose_device("cuda").cuda_device, 0);
  EXPECT_EQ(choose_device("auto").cuda_device, 0);
  auto host = make_host_backend(1);
  std::vector<unsigned char> want(2 * 1001);
  const FillJob host_job = make_fill_job(want.data(), DType::bf16, 1001, 9, "w", FillSpec::normal(0, 0.02));
  host->fill(std::span(&host_job, 1));
  for (const int d : {1, 3, 0}) {
    SCOPED_TRACE(d);
    auto be = make_backend("cuda:" + std::to_string(d));
    EXPECT_EQ(be->kind(), BackendKind::cuda);
    EXPECT_EQ(be->describe().rfind("cuda:" + std::to_string(d) + " ", 0), 0u) << be->describe();
    EXPECT_EQ(be->memory().kind(), MemoryKind::device);
    tracking_resource tr(be->memory());
    Storage buf = Storage::allocate(tr, 2 * 1001, {"w", DType::bf16});
    const FillJob j = make_fill_job(buf.data(), DType::bf16, 1001, 9, "w", FillSpec::normal(0, 0.02));
    be->fill(std::span(&j, 1));
    std::vector<unsigned char> got(want.size());
    be->copy_to_host(got.data(), buf.data(), got.size());
    EXPECT_EQ(got, want);
    const auto events = node.events();
    ASSERT_EQ(events.size(), 3u);
    using W = SimulatedDeviceEvent::What;
    const std::vector<std::tuple<int, W, std::uint64_t>> expected = {{d, W::allocate, 2002}, {d, W::fill, 2002}, {d, W::copy_to_host, 2002}};
    for (std::size_t i = 0; i < events.size(); ++i)
      EXPECT_EQ(std::make_tuple(events[i].device, events[i].what, events[i].bytes), expected[i]) << i;
  }
  try {
    (void)make_backend("cuda:4");
    ADD_FAILURE() << "cuda:4 of a node of 4 was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "backend 'cuda:4' does not exist: this process sees 4 CUDA devices (cuda:0 to cuda:3)");
  }
  EXPECT_TRUE(node.events().empty());
}

TEST(Backend, HostFillAndCopies) {
  auto be = make_backend("cpu", 2);
  tracking_resource tr(be->memory());
  const std::uint64_t n = 100003;
  Storage buf = Storage::allocate(tr, n * 2, {"w", DType::bf16});
  const FillJob j = make_fill_job(buf.data(), DType::bf16, n, 5, "w", FillSpec::normal(0, 0.02));
  be->fill(std::span(&j, 1));
  be->synchronize();
  std::vector<unsigned char> ref(n * 2);
  FillJob jr = j;
  jr.dst = ref.data();
  fill_host(std::span(&jr, 1), 1);
  std::vector<unsigned char> back(n * 2);
  be->copy_to_host(back.data(), buf.data(), n * 2);
  EXPECT_TRUE(back == ref);
  Storage other = Storage::allocate(tr, n * 2, {});
  be->copy(other.data(), buf.data(), n * 2);
  EXPECT_EQ(std::memcmp(other.data(), ref.data(), n * 2), 0);
  expect_stats(tr.stats(), 4 * n, 4 * n, 4 * n, 2, 2, 2, "two tensors");
}

// Backends over a caller's queue (backends/caller_queue.hpp), which the XLA FFI handlers fill through:
// the simulated CUDA stand-in writes the host backend's bytes and records its device when the node is
// simulated; the CUDA backend on a caller's stream refuses where CUDA is unusable, naming why.
namespace {

// A normal fill of `n` bf16 elements named `name` by `be`, as bytes.
std::vector<std::uint16_t> filled_by(backend& be, std::uint64_t n, const std::string& name) {
  std::vector<std::uint16_t> out(n);
  const FillJob job = make_fill_job(out.data(), DType::bf16, n, 7, name, FillSpec::normal(0, 0.02));
  be.fill({&job, 1});
  be.synchronize();
  return out;
}

}  // namespace

TEST(Backend, SimulatedCudaBackendWritesTheHostBytes) {
  const auto host = make_host_backend(2);
  const auto sim = make_simulated_cuda_backend(5);
  EXPECT_EQ(sim->kind(), BackendKind::cuda);
  EXPECT_EQ(sim->describe(), "cuda:5 simulated (host memory)");
  const std::vector<std::uint16_t> want = filled_by(*host, 10'007, "w");
  EXPECT_EQ(filled_by(*sim, 10'007, "w"), want);
  EXPECT_NE(filled_by(*sim, 10'007, "v"), want);
}

TEST(Backend, SimulatedCudaBackendRecordsItsDeviceOnASimulatedNode) {
  const layerinit::testing::SimulatedNode node(8);
  const auto sim = make_simulated_cuda_backend(6);
  (void)filled_by(*sim, 100, "w");
  const std::vector<SimulatedDeviceEvent> events = layerinit::testing::SimulatedNode::events();
  ASSERT_EQ(events.size(), 2u);  // the fill, then filled_by's synchronize
  EXPECT_EQ(events[0].device, 6);
  EXPECT_EQ(events[0].what, SimulatedDeviceEvent::What::fill);
  EXPECT_EQ(events[0].bytes, 200u);
  EXPECT_EQ(events[1].device, 6);
  EXPECT_EQ(events[1].what, SimulatedDeviceEvent::What::synchronize);
}

TEST(Backend, CudaBackendOnAStreamNamesWhyCudaIsUnusable) {
  const CudaProbe p = cuda_probe(0);
  if (p.usable) GTEST_SKIP() << "a CUDA device is usable here: tests/gpu/ fill on a caller's stream";
  int stream_stand_in = 0;  // never used: the backend is refused first
  try {
    (void)make_cuda_backend_on_stream(0, &stream_stand_in);
    FAIL() << "made a CUDA backend where CUDA is unusable";
  } catch (const error& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("CUDA backend unusable: ") ||
                std::string(e.what()) == "CUDA backend unavailable: layerinit was built without CUDA")
        << e.what();
  }
}

// A freed block comes back to the next allocation of its exact size; a size no kept block has hands
// every kept block back upstream first, so upstream's peak is the larger "part", not their sum; the
// destructor hands back what is kept.
TEST(Recycling, ExactSizesComeBackAndAMissHandsBackFirst) {
  host_resource host;
  tracking_resource upstream(host);
  {
    recycling_resource r(upstream);
    void* a = r.allocate(8192);
    void* b = r.allocate(16384);
    r.deallocate(a, 8192);
    r.deallocate(b, 16384);
    EXPECT_EQ(r.kept_bytes(), 8192u + 16384u);
    EXPECT_EQ(upstream.stats().current_bytes, 8192u + 16384u);
    EXPECT_EQ(r.allocate(16384), b);  // the kept block, not a new one
    EXPECT_EQ(r.reused(), 1u);
    EXPECT_EQ(r.kept_bytes(), 8192u);
    EXPECT_EQ(upstream.stats().total_count, 2u);
    void* c = r.allocate(100);  // no kept block of its size: the 8192 goes back before it is taken
    EXPECT_EQ(r.kept_bytes(), 0u);
    EXPECT_EQ(upstream.stats().current_bytes, 16384u + 100u);
    EXPECT_EQ(upstream.stats().peak_bytes, 8192u + 16384u);  // not + 100
    r.deallocate(b, 16384);
    r.deallocate(c, 100);
    EXPECT_EQ(upstream.stats().current_bytes, 16384u + 100u);  // kept
    EXPECT_EQ(r.allocate(100), c);
    r.deallocate(c, 100);
  }
  EXPECT_EQ(upstream.stats().current_bytes, 0u);  // handed back by the destructor
  EXPECT_EQ(upstream.stats().total_count, 3u);
}
