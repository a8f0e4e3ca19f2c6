#include <layerinit/checkpoint/verify.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>
#include <limits>
#include <new>
#include <set>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include <layerinit/backends/content_hash.hpp>
#include <layerinit/checkpoint/detail.hpp>
#include <layerinit/checkpoint/verify_document.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/core/bytes.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/memory/available.hpp>

namespace layerinit {

std::string_view check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::equal: return "equal";
    case CheckStatus::differs: return "differs";
    case CheckStatus::missing: return "missing";
    case CheckStatus::unexpected: return "unexpected";
  }
  return "?";
}

namespace {

using Bytes = std::vector<unsigned char>;

// A tensor of the model as the checkpoint should store it: whole, or a stacked [L, ...] / [L, E, ...]
// buffer whose slices are the layers' (and experts') tensors.
struct Expected {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  std::size_t lead = 0;                // leading dimensions that index slices: 0, 1 or 2
  std::vector<PlannedTensor> slices;   // one per slice, row-major over the leading dimensions
  std::uint64_t slice_numel = 0;
  std::uint64_t numel() const { return layerinit::numel(shape); }
  std::uint64_t bytes() const { return numel() * dtype_size(dtype); }
};

std::vector<Expected> expected_tensors(const Builder& b) {
  std::vector<Expected> out;
  // Stacked buffer name (a view of the walk's layout, alive for the whole walk) -> index in `out`.
  std::unordered_map<std::string_view, std::size_t> buffer_at;
  auto whole = [&](const PlannedTensor& p) {
    Expected& e = out.emplace_back();
    e.name = p.name;
    e.shape = p.memory_shape;
    e.dtype = p.dtype;
    e.slices = {p};
    e.slice_numel = p.numel();
  };
  b.walk({.mode = WalkMode::parts}, [&](const PlanStep& s) {
    if (!s.layout) {
      for (const PlannedTensor& p : s.tensors) whole(p);
      return;
    }
    for (std::size_t j = 0; j < s.tensors.size(); ++j) {
      const StackedTensor& buf = s.buffers[s.layout->buffer[j]];
      auto [it, added] = buffer_at.try_emplace(buf.name, out.size());
      if (added) {
        Expected& e = out.emplace_back();
        e.name = std::string(buf.name);
        e.shape = buf.shape;
        e.dtype = buf.dtype;
        e.slice_numel = buf.slice_numel;
        e.lead = s.layout->buffers[s.layout->buffer[j]].fused ? 2 : 1;
        e.slices.resize(buf.slice_numel ? layerinit::numel(buf.shape) / buf.slice_numel : 0);
      }
      Expected& e = out[it->second];
      const std::uint64_t slice = s.layout->slice(j, s.layer);
      if (slice < e.slices.size()) e.slices[slice] = s.tensors[j];
    }
  });
  return out;
}

// The jobs that write elements [first, first + n) of `e` at `dst`, with `seed` (and `dtype` instead
// of the model's, for the other_dtype diagnosis).
void range_jobs(const Expected& e, std::uint64_t first, std::uint64_t n, unsigned char* dst, std::uint64_t seed,
                std::optional<DType> dtype, std::vector<FillJob>& jobs) {
  const DType t = dtype.value_or(e.dtype);
  const std::uint64_t esize = dtype_size(t);
  const std::uint64_t end = first + n;
  const std::uint64_t per = std::max<std::uint64_t>(e.slice_numel, 1);
  for (std::uint64_t s = first / per; s < e.slices.size() && s * per < end; ++s) {
    const std::uint64_t a = std::max(first, s * per), z = std::min(end, (s + 1) * per);
    if (a >= z) continue;
    PlannedTensor p = e.slices[s];
    if (dtype && *dtype != p.dtype) {
      p.dtype = *dtype;
      p.unprepare();
    }
    range_fill_jobs(p, tensor_fill(p, seed), a - s * per, z - a, dst + (a - first) * esize, jobs);
  }
}

void fill_now(backend& be, const std::vector<FillJob>& jobs) {
  if (jobs.empty()) return;
  be.fill(jobs);
  be.synchronize();
}

// Elements [first, first + n) of `e` into dst.
void generate(backend& be, const Expected& e, std::uint64_t first, std::uint64_t n, unsigned char* dst, std::uint64_t seed,
              std::optional<DType> dtype = std::nullopt) {
  std::vector<FillJob> jobs;
  range_jobs(e, first, n, dst, seed, dtype, jobs);
  fill_now(be, jobs);
}

// `box` of `e` (a rank's piece), densely into dst.
void generate_box(backend& be, const Expected& e, const Box& box, unsigned char* dst, std::uint64_t seed) {
  std::vector<FillJob> jobs;
  const Box inner{Shape(box.offset.begin() + static_cast<std::ptrdiff_t>(e.lead), box.offset.end()),
                  Shape(box.shape.begin() + static_cast<std::ptrdiff_t>(e.lead), box.shape.end())};
  const std::uint64_t inner_bytes = numel(inner.shape) * dtype_size(e.dtype);
  // Slices in the box, row-major over the leading dimensions.
  std::vector<std::uint64_t> at(box.offset.begin(), box.offset.begin() + static_cast<std::ptrdiff_t>(e.lead));
  std::uint64_t k = 0;
  const std::uint64_t count = e.lead ? numel(Shape(box.shape.begin(), box.shape.begin() + static_cast<std::ptrdiff_t>(e.lead))) : 1;
  for (std::uint64_t c = 0; c < count; ++c, ++k) {
    std::uint64_t slice = 0;
    for (std::size_t d = 0; d < e.lead; ++d) slice = slice * e.shape[d] + at[d];
    box_fill_jobs(e.slices[slice], inner, dst + k * inner_bytes, seed, jobs);
    for (std::size_t d = e.lead; d-- > 0;) {  // next index, last dimension fastest
      if (++at[d] < box.offset[d] + box.shape[d]) break;
      at[d] = box.offset[d];
    }
  }
  fill_now(be, jobs);
}

// Element size of a stored tensor: its dtype's, else as the reader names it (0 when unknown).
std::uint64_t element_size(const StoredTensor& s) { return s.dtype ? dtype_size(*s.dtype) : detail::element_size(s.dtype_text); }

// The stored dtype as reports name it: layerinit's name ("bf16") for its own dtypes, else the file's.
std::string stored_dtype_name(const StoredTensor& s) { return s.dtype ? std::string(dtype_name(*s.dtype)) : s.dtype_text; }

bool is_f64(const StoredTensor& s) {
  return !s.dtype && (s.dtype_text == "F64" || s.dtype_text == "f64");  // safetensors' and the HDF5 reader's names
}

std::uint64_t bits_at(const unsigned char* p, std::uint64_t i, std::uint64_t esize) {
  std::uint64_t v = 0;
  std::memcpy(&v, p + i * esize, esize);  // little-endian host
  return v;
}

double value_of(std::uint64_t bits, std::optional<DType> t, bool f64) {
  if (f64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (!t) return std::numeric_limits<double>::quiet_NaN();
  switch (*t) {
    case DType::f32: {
      float f;
      const auto b = static_cast<std::uint32_t>(bits);
      std::memcpy(&f, &b, 4);
      return f;
    }
    case DType::f16: return f16_bits_to_float(static_cast<std::uint16_t>(bits));
    case DType::bf16: return bf16_bits_to_float(static_cast<std::uint16_t>(bits));
  }
  return 0;
}

// A float's bits in t, rounded to nearest even.
std::uint64_t bits_of(float v, DType t) {
  switch (t) {
    case DType::f32: {
      std::uint32_t b;
      std::memcpy(&b, &v, 4);
      return b;
    }
    case DType::f16: return float_to_f16_bits(v);
    case DType::bf16: return float_to_bf16_bits(v);
  }
  return 0;
}

Shape coords_of(std::uint64_t index, const Shape& shape) {
  Shape c(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = shape[d] ? index % shape[d] : 0;
    index = shape[d] ? index / shape[d] : 0;
  }
  return c;
}

std::string number(double v) {
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

std::string heads_text(std::uint64_t h) { return std::to_string(h) + (h == 1 ? " head" : " heads"); }


// A metadata seed: decimal digits of a value below 2^64, nothing else.
std::optional<std::uint64_t> seed_of(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// One thread beside the caller for the whole verify, running one task at a time (the next chunk's
// read while this one is made and compared): a thread per chunk was 584 thread starts for gpt2-large.
class Beside {
 public:
  Beside() : thread_([this] { loop(); }) {}
  ~Beside() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // a task still running (an exception left it) ends first
  }
  Beside(const Beside&) = delete;
  Beside& operator=(const Beside&) = delete;

  // Starts `task`; the one before must have been waited for.
  void start(std::function<void()> task) {
    {
      std::lock_guard lock(m_);
      task_ = std::move(task);
      done_ = false;
    }
    cv_.notify_all();
  }
  // Waits for the task started last; rethrows what it threw.
  void wait() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return done_; });
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || task_; });
      if (!task_) return;
      const std::function<void()> task = std::exchange(task_, nullptr);
      lock.unlock();
      std::exception_ptr failure;
      try {
        task();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      failure_ = failure;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool done_ = true, stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // last: it starts once the rest exists
};

// What verify knows of a tensor while it works.
struct Work {
  TensorCheck check;
  std::optional<std::uint64_t> expected_hash, stored_hash;
  std::vector<std::size_t> stored;  // indices into the reader's tensors
  const Expected* expected = nullptr;
};

class Verifier {
 public:
  Verifier(const Builder& b, CheckpointReader& r, const VerifyOptions& opts)
      : b_(b), r_(r), opts_(opts), be_(b.target_backend()), seed_(b.options().seed), t0_(std::chrono::steady_clock::now()) {
    LAYERINIT_EXPECTS(be_.memory().kind() == MemoryKind::host, "verify fills on the host: give the builder a host backend");
  }

  VerifyReport run() {
    expected_ = expected_tensors(b_);
    const auto& stored = r_.tensors();
    std::unordered_map<std::string_view, std::vector<std::size_t>> by_name;
    for (std::size_t k = 0; k < stored.size(); ++k) by_name[stored[k].name].push_back(k);
    std::set<std::string_view> known;
    for (const Expected& e : expected_) {
      known.insert(e.name);
      progress_.bytes_total += e.bytes();
    }
    progress_.tensors_total = expected_.size();

    work_.reserve(expected_.size());
    for (const Expected& e : expected_) {
      Work& w = work_.emplace_back();
      w.expected = &e;
      w.check.name = e.name;
      w.check.expected_shape = e.shape;
      w.check.expected_dtype = std::string(dtype_name(e.dtype));
      if (const auto it = by_name.find(e.name); it != by_name.end()) w.stored = it->second;
    }
    // compare()'s three chunk buffers, for the largest chunk of all: made once, not zeroed (every
    // byte is read into or made before it is looked at).
    std::uint64_t chunk_bytes = 0;
    for (const Work& w : work_)
      if (streamed(w)) chunk_bytes = std::max(chunk_bytes, first_chunk(w) * dtype_size(w.expected->dtype));
    std::apply([&](auto&... b) { (b.reset(new unsigned char[std::max<std::uint64_t>(chunk_bytes, 1)]), ...); }, buffers_);
    for (std::size_t i = 0; i < work_.size(); ++i) {
      compare(work_[i], i + 1 < work_.size() ? &work_[i + 1] : nullptr);
      ++progress_.tensors_done;
      report_progress();
    }
    for (std::size_t k = 0; k < stored.size(); ++k) {
      if (known.count(stored[k].name)) continue;
      if (!unexpected_.empty() && stored[unexpected_.back().stored.back()].name == stored[k].name) {
        unexpected_.back().stored.push_back(k);  // another piece of it
        continue;
      }
      Work& w = unexpected_.emplace_back();
      w.check.name = stored[k].name;
      w.check.status = CheckStatus::unexpected;
      w.check.stored_shape = stored[k].global_shape.empty() ? stored[k].shape : stored[k].global_shape;
      w.check.stored_dtype = stored_dtype_name(stored[k]);
      w.check.file = stored[k].file;
      w.stored.push_back(k);
    }
    if (opts_.diagnose) diagnose_all();

    VerifyReport out;
    for (auto* list : {&work_, &unexpected_})
      for (Work& w : *list) {
        switch (w.check.status) {
          case CheckStatus::equal: ++out.equal; break;
          case CheckStatus::differs: ++out.differs; break;
          case CheckStatus::missing: ++out.missing; break;
          case CheckStatus::unexpected: ++out.unexpected; break;
        }
        out.tensors.push_back(std::move(w.check));
      }
    out.bytes_read = bytes_read_;
    out.seconds = seconds();
    return out;
  }

 private:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void report_progress() {
    if (opts_.cancel && opts_.cancel->load()) throw error("interrupted");
    progress_.seconds = seconds();
    if (opts_.progress) opts_.progress(progress_);
  }

  void read(std::size_t k, std::uint64_t first, std::uint64_t n, void* out) {
    r_.read(k, first, n, out);
    bytes_read_ += n * element_size(r_.tensors()[k]);
  }

  // Whether compare() reads `w` chunk by chunk from one stored tensor of its shape and dtype (not
  // missing, not a rank's pieces, not a tensor stored otherwise), with at least one element.
  bool streamed(const Work& w) const {
    if (w.stored.empty()) return false;
    const StoredTensor& first = r_.tensors()[w.stored.front()];
    return first.global_shape.empty() && first.shape == w.expected->shape && first.dtype == w.expected->dtype &&
           w.expected->numel() > 0;
  }
  // Elements of `e` per compared chunk; a tensor's first chunk.
  std::uint64_t chunk_elements(const Expected& e) const { return std::max<std::uint64_t>(opts_.chunk_bytes / dtype_size(e.dtype), 1); }
  std::uint64_t first_chunk(const Work& w) const { return std::min(w.expected->numel(), chunk_elements(*w.expected)); }

  // `next_work`: the one compared after `w`; when it is streamed too, its first chunk is read while
  // w's last is made and compared (a wait for each tensor's first read cost a scheduler's time slice
  // per tensor under load).
  void compare(Work& w, const Work* next_work) {
    const Expected& e = *w.expected;
    const auto& stored = r_.tensors();
    if (w.stored.empty()) {
      w.check.status = CheckStatus::missing;
      return;
    }
    const StoredTensor& first = stored[w.stored.front()];
    w.check.stored_dtype = stored_dtype_name(first);
    w.check.file = first.file;
    if (!first.global_shape.empty()) return compare_pieces(w);
    w.check.stored_shape = first.shape;
    if (first.shape != e.shape || first.dtype != e.dtype) {
      w.check.status = CheckStatus::differs;
      progress_.bytes_done += e.bytes();
      return;
    }
    // Chunk by chunk: the next chunk is read (beside_) while this one is made and compared. The
    // expected side is hashed only from its first difference on: until then its bytes are the
    // stored ones.
    const std::uint64_t esize = dtype_size(e.dtype), n = e.numel();
    const std::uint64_t chunk = chunk_elements(e);
    auto& [have, next, want] = buffers_;
    ContentHash stored_hash;
    std::optional<ContentHash> expected_hash;
    const std::size_t k = w.stored.front();
    if (n && ahead_ != &w) beside_.start([&, c = std::min(n, chunk), dst = next.get()] { read(k, 0, c, dst); });
    ahead_ = nullptr;
    for (std::uint64_t at = 0; at < n; at += chunk) {
      const std::uint64_t c = std::min(chunk, n - at);
      beside_.wait();
      std::swap(have, next);
      if (at + c < n) {
        beside_.start([&, from = at + c, m = std::min(chunk, n - at - c), dst = next.get()] { read(k, from, m, dst); });
      } else if (next_work && streamed(*next_work)) {
        beside_.start([this, j = next_work->stored.front(), m = first_chunk(*next_work), dst = next.get()] { read(j, 0, m, dst); });
        ahead_ = next_work;
      }
      generate(be_, e, at, c, want.get(), seed_);
      const bool same = std::memcmp(have.get(), want.get(), c * esize) == 0;
      if (!same && !expected_hash) expected_hash.emplace(stored_hash.copy());
      stored_hash.update(have.get(), c * esize);
      if (expected_hash) expected_hash->update(want.get(), c * esize);
      if (!same)
        for (std::uint64_t i = 0; i < c; ++i)
          if (std::memcmp(have.get() + i * esize, want.get() + i * esize, esize) != 0) {
            if (!w.check.first_difference)
              w.check.first_difference = difference(at + i, e.shape, want.get(), have.get(), i, e.dtype);
            ++w.check.differing;
          }
      w.check.elements += c;
      progress_.bytes_done += c * esize;
      if (at + c < n) report_progress();
    }
    w.stored_hash = stored_hash.digest();
    w.expected_hash = expected_hash ? expected_hash->digest() : *w.stored_hash;
    w.check.status = w.check.differing ? CheckStatus::differs : CheckStatus::equal;
  }

  ElementDifference difference(std::uint64_t index, const Shape& shape, const unsigned char* want, const unsigned char* have,
                               std::uint64_t i, DType t) const {
    ElementDifference d;
    const std::uint64_t esize = dtype_size(t);
    d.index = index;
    d.coords = coords_of(index, shape);
    d.expected_bits = bits_at(want, i, esize);
    d.stored_bits = bits_at(have, i, esize);
    d.expected = value_of(d.expected_bits, t, false);
    d.stored = value_of(d.stored_bits, t, false);
    return d;
  }

  // A rank's pieces: each compared whole with its box of the tensor; the distinct boxes must tile it.
  void compare_pieces(Work& w) {
    const Expected& e = *w.expected;
    const auto& stored = r_.tensors();
    std::vector<Box> boxes;
    w.check.stored_shape = stored[w.stored.front()].global_shape;
    for (const std::size_t k : w.stored) {
      const StoredTensor& s = stored[k];
      ++w.check.pieces;
      if (s.global_shape != e.shape || s.dtype != e.dtype || s.offset.size() != e.shape.size() ||
          s.shape.size() != e.shape.size()) {
        w.check.stored_shape = s.global_shape;
        w.check.stored_dtype = stored_dtype_name(s);
        w.check.status = CheckStatus::differs;
        return;
      }
      const Box box{s.offset, s.shape};
      for (std::size_t d = 0; d < e.shape.size(); ++d)
        if (box.offset[d] + box.shape[d] > e.shape[d]) {
          w.check.status = CheckStatus::differs;
          return;
        }
      if (std::find(boxes.begin(), boxes.end(), box) == boxes.end()) boxes.push_back(box);
      const std::uint64_t esize = dtype_size(e.dtype), n = box.numel();
      Bytes have(n * esize), want(n * esize);
      if (n) read(k, 0, n, have.data());
      generate_box(be_, e, box, want.data(), seed_);
      for (std::uint64_t i = 0; i < n; ++i)
        if (std::memcmp(have.data() + i * esize, want.data() + i * esize, esize) != 0) {
          if (!w.check.first_difference) {
            // The index in the whole tensor.
            const Shape local = coords_of(i, box.shape);
            std::uint64_t global = 0;
            for (std::size_t d = 0; d < e.shape.size(); ++d) global = global * e.shape[d] + box.offset[d] + local[d];
            w.check.first_difference = difference(global, e.shape, want.data(), have.data(), i, e.dtype);
            w.check.file = s.file;
          }
          ++w.check.differing;
        }
      w.check.elements += n;
      report_progress();
    }
    // Pieces of one mesh are the same box (replicas) or disjoint: the distinct boxes' sizes add up
    // to the tensor's exactly when they cover it.
    std::uint64_t covered = 0;
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      covered += boxes[i].numel();
      for (std::size_t j = 0; j < i; ++j) {
        bool overlap = true;
        for (std::size_t d = 0; d < e.shape.size() && overlap; ++d)
          overlap = boxes[i].offset[d] < boxes[j].offset[d] + boxes[j].shape[d] && boxes[j].offset[d] < boxes[i].offset[d] + boxes[i].shape[d];
        if (overlap && boxes[i].numel() && boxes[j].numel()) {
          w.check.status = CheckStatus::differs;
          w.check.diagnosis = Diagnosis{"none", "its pieces overlap without being the same piece: not one mesh's", "", {}, {}, {}, {}, {}};
          return;
        }
      }
    }
    progress_.bytes_done += e.bytes();
    w.check.uncovered = e.numel() - std::min(covered, e.numel());
    w.check.status = w.check.differing ? CheckStatus::differs : w.check.uncovered ? CheckStatus::missing : CheckStatus::equal;
  }

  // --- Diagnosis --------------------------------------------------------------------------------

  Bytes expected_bytes(const Expected& e, std::optional<std::uint64_t> seed = std::nullopt, std::optional<DType> dtype = std::nullopt) {
    Bytes out(e.numel() * dtype_size(dtype.value_or(e.dtype)));
    generate(be_, e, 0, e.numel(), out.data(), seed.value_or(seed_), dtype);
    return out;
  }

  Bytes stored_bytes(std::size_t k) {
    const StoredTensor& s = r_.tensors()[k];
    const std::uint64_t esize = element_size(s);
    Bytes out(numel(s.shape) * esize);
    if (esize && !out.empty()) read(k, 0, numel(s.shape), out.data());
    return out;
  }

  // The content hash of what `e` should hold, made chunk by chunk as compare() makes it (a whole
  // copy of a tensor the file lacks could exceed the memory).
  std::uint64_t expected_hash_of(const Expected& e) {
    const std::uint64_t esize = dtype_size(e.dtype), n = e.numel();
    const std::uint64_t chunk = chunk_elements(e);
    Bytes want(std::min(n, chunk) * esize);
    ContentHash h;
    for (std::uint64_t at = 0; at < n; at += chunk) {
      const std::uint64_t c = std::min(chunk, n - at);
      generate(be_, e, at, c, want.data(), seed_);
      h.update(want.data(), c * esize);
    }
    return h.digest();
  }

  // Whether a diagnosis holding `bytes` (the stored and expected tensors) may take its memory, about
  // three times that at its worst (a transposed or re-seeded copy beside both); else `out` says it
  // was not diagnosed and why. The verdict stands either way.
  bool diagnosis_fits(std::uint64_t bytes, std::optional<Diagnosis>& out) {
    if (!diagnosis_memory_) {
      const auto a = available_host_memory();
      diagnosis_memory_ = opts_.diagnosis_memory ? *opts_.diagnosis_memory : a ? a->bytes : UINT64_MAX;
    }
    const std::uint64_t need = saturating_mul(bytes, 3);
    if (need <= *diagnosis_memory_) return true;
    out = make("none", "not diagnosed: its diagnosis needs about " + format_bytes(need) + " of memory, " +
                           format_bytes(*diagnosis_memory_) + " available");
    return false;
  }

  void diagnose_all() {
    bool any = false;
    for (const Work& w : work_) any |= w.check.status != CheckStatus::equal;
    if (!any && unexpected_.empty()) return;
    // Every expected tensor's hash, for "holds another tensor's values".
    for (Work& w : work_)
      if (!w.expected_hash) w.expected_hash = expected_hash_of(*w.expected);
    for (Work& w : work_) by_hash_.emplace(*w.expected_hash, &w);

    // What cannot get its memory after all (the estimate is one) is not diagnosed, saying so.
    auto guarded = [&](Work& w, auto diagnose_one) {
      try {
        diagnose_one(w);
      } catch (const std::bad_alloc&) {
        w.check.diagnosis = make("none", "not diagnosed: out of memory");
      }
      report_progress();
    };
    for (Work& w : work_) {
      if (w.check.status != CheckStatus::differs || w.stored.size() != 1 || w.check.pieces) continue;
      guarded(w, [&](Work& x) { diagnose_differs(x); });
    }
    for (Work& u : unexpected_) {
      if (u.stored.size() != 1 || !r_.tensors()[u.stored.front()].global_shape.empty()) continue;
      guarded(u, [&](Work& x) { diagnose_unexpected(x); });
    }
  }

  static Diagnosis make(std::string kind, std::string text) {
    Diagnosis d;
    d.kind = std::move(kind);
    d.text = std::move(text);
    return d;
  }

  void diagnose_differs(Work& w) {
    const Expected& e = *w.expected;
    const StoredTensor& s = r_.tensors()[w.stored.front()];
    const std::uint64_t esize = element_size(s);
    if (!esize || (!s.dtype && !is_f64(s))) {
      w.check.diagnosis = make("none", "stored as " + s.dtype_text + ", a dtype layerinit does not compare");
      return;
    }
    if (!diagnosis_fits(saturating_add(saturating_mul(numel(s.shape), esize), e.bytes()), w.check.diagnosis)) return;
    const Bytes have = stored_bytes(w.stored.front());
    w.stored_hash = content_hash(have.data(), have.size());
    const Bytes want = expected_bytes(e);
    w.check.diagnosis = diagnose(e, s, have, want, *w.stored_hash, w.check.name);
  }

  Diagnosis diagnose(const Expected& e, const StoredTensor& s, const Bytes& have, const Bytes& want, std::uint64_t have_hash,
                     std::string_view self) {
    const std::uint64_t n = numel(s.shape);
    // Another dtype first: a constant init (a norm's ones, a router bias's zeros) kept in fp32 by a
    // converter is the expected values converted, not "every element is 1".
    if (n == e.numel() && s.dtype != e.dtype)
      if (auto d = dtype_diagnosis(e, s, have, want)) return *d;
    if (auto d = constant_diagnosis(s, have)) return *d;
    // Another tensor's bytes: swapped, or tied to it.
    if (const auto [a, z] = by_hash_.equal_range(have_hash); a != z)
      for (auto it = a; it != z; ++it)
        if (it->second->check.name != self && it->second->expected->bytes() == have.size()) {
          Diagnosis d = make("other_tensor", "holds the values of " + it->second->check.name + " (swapped with it, or tied to it)");
          d.tensor = it->second->check.name;
          return d;
        }
    if (n == e.numel()) {
      if (s.dtype == e.dtype && s.shape == e.shape)
        if (auto d = rounding_diagnosis(e, have)) return *d;
      if (s.dtype == e.dtype) {
        if (auto d = transpose_diagnosis(e, s, have, want)) return *d;
        if (s.shape != e.shape && have == want)
          return make("reshaped", "the expected values in another shape: " + shape_string(s.shape) + " where " + shape_string(e.shape) +
                                      " was expected");
        if (s.shape == e.shape) {
          if (auto d = row_diagnosis(e, have, want)) return *d;
          if (auto d = seed_diagnosis(e, have)) return *d;
        }
      }
    }
    std::string text = "no known transformation gives the stored values";
    if (s.shape != e.shape) text += " (stored " + shape_string(s.shape) + " where " + shape_string(e.shape) + " was expected)";
    else if (s.dtype != e.dtype) text += " (stored as " + stored_dtype_name(s) + " where " + std::string(dtype_name(e.dtype)) + " was expected)";
    return make("none", text);
  }

  // Every element the same bits.
  static std::optional<Diagnosis> constant_diagnosis(const StoredTensor& s, const Bytes& have) {
    const std::uint64_t esize = element_size(s), n = numel(s.shape);
    if (n == 0 || esize == 0) return std::nullopt;
    for (std::uint64_t i = 1; i < n; ++i)
      if (std::memcmp(have.data(), have.data() + i * esize, esize) != 0) return std::nullopt;
    const double v = value_of(bits_at(have.data(), 0, esize), s.dtype, is_f64(s));
    if (v == 0 && !std::signbit(v)) return make("zeros", "every element is 0");
    return make("constant", "every element is " + number(v));
  }

  // Stored in another dtype: the expected values exactly, or rounded to it, or the init made in it.
  std::optional<Diagnosis> dtype_diagnosis(const Expected& e, const StoredTensor& s, const Bytes& have, const Bytes& want) {
    const std::uint64_t n = e.numel(), hs = element_size(s), ws = dtype_size(e.dtype);
    const bool f64 = is_f64(s);
    const std::string from(dtype_name(e.dtype));
    bool exact = true;
    for (std::uint64_t i = 0; i < n && exact; ++i)
      exact = value_of(bits_at(have.data(), i, hs), s.dtype, f64) == value_of(bits_at(want.data(), i, ws), e.dtype, false);
    if (exact) return make("converted", "the expected " + from + " values exactly, stored as " + stored_dtype_name(s));
    if (s.dtype) {
      bool rounded = true;
      for (std::uint64_t i = 0; i < n && rounded; ++i)
        rounded = bits_of(static_cast<float>(value_of(bits_at(want.data(), i, ws), e.dtype, false)), *s.dtype) == bits_at(have.data(), i, hs);
      if (rounded) return make("rounded", "the expected " + from + " values rounded to " + stored_dtype_name(s));
      if (expected_bytes(e, std::nullopt, *s.dtype) == have) {
        Diagnosis d = make("other_dtype", "the init made in " + std::string(dtype_name(*s.dtype)) + " (the stored dtype), not " + from);
        d.dtype = *s.dtype;
        return d;
      }
    }
    return std::nullopt;
  }

  // The right dtype, but the values of the init made in another one and then cast.
  std::optional<Diagnosis> rounding_diagnosis(const Expected& e, const Bytes& have) {
    const std::uint64_t n = e.numel(), hs = dtype_size(e.dtype);
    for (const DType t : all_dtypes) {
      if (t == e.dtype) continue;
      const Bytes other = expected_bytes(e, std::nullopt, t);
      bool same = true;
      for (std::uint64_t i = 0; i < n && same; ++i)
        same = bits_of(static_cast<float>(value_of(bits_at(other.data(), i, dtype_size(t)), t, false)), e.dtype) == bits_at(have.data(), i, hs);
      if (same) {
        Diagnosis d = make("other_dtype", "the init made in " + std::string(dtype_name(t)) + ", then cast to " +
                                              std::string(dtype_name(e.dtype)));
        d.dtype = t;
        return d;
      }
    }
    return std::nullopt;
  }

  // The last two dimensions swapped (each [.., a, b] matrix stored [.., b, a]).
  std::optional<Diagnosis> transpose_diagnosis(const Expected& e, const StoredTensor& s, const Bytes& have, const Bytes& want) {
    const std::size_t r = e.shape.size();
    if (r < 2 || s.shape.size() != r) return std::nullopt;
    Shape swapped = e.shape;
    std::swap(swapped[r - 1], swapped[r - 2]);
    if (s.shape != swapped) return std::nullopt;
    const std::uint64_t rows = e.shape[r - 2], cols = e.shape[r - 1], esize = dtype_size(e.dtype);
    const std::uint64_t mats = rows * cols != 0 ? e.numel() / (rows * cols) : 0;
    for (std::uint64_t m = 0; m < mats; ++m)
      for (std::uint64_t i = 0; i < rows; ++i)
        for (std::uint64_t j = 0; j < cols; ++j)
          if (std::memcmp(want.data() + ((m * rows + i) * cols + j) * esize, have.data() + ((m * cols + j) * rows + i) * esize, esize) != 0)
            return std::nullopt;
    return make("transposed", "the expected values transposed: stored " + shape_string(s.shape) + " where " + shape_string(e.shape) +
                                  " was expected");
  }

  // Rows (vectors of the last dimension) permuted: by Meta's / Hugging Face's RoPE permutation per
  // head, or by no known rule.
  std::optional<Diagnosis> row_diagnosis(const Expected& e, const Bytes& have, const Bytes& want) {
    if (e.shape.size() < 2) return std::nullopt;
    const std::uint64_t cols = e.shape.back(), esize = dtype_size(e.dtype), row = cols * esize;
    const std::uint64_t rows = cols ? e.numel() / cols : 0, matrix_rows = e.shape[e.shape.size() - 2];
    if (rows < 2 || row == 0) return std::nullopt;
    std::unordered_multimap<std::uint64_t, std::uint64_t> want_rows;
    for (std::uint64_t i = 0; i < rows; ++i) want_rows.emplace(content_hash(want.data() + i * row, row), i);
    // perm[i]: the expected row stored as row i.
    std::vector<std::uint64_t> perm(rows);
    std::vector<bool> used(rows, false);
    for (std::uint64_t i = 0; i < rows; ++i) {
      const auto [a, z] = want_rows.equal_range(content_hash(have.data() + i * row, row));
      bool found = false;
      for (auto it = a; it != z && !found; ++it)
        if (!used[it->second] && std::memcmp(want.data() + it->second * row, have.data() + i * row, row) == 0) {
          perm[i] = it->second;
          used[it->second] = found = true;
        }
      if (!found) return std::nullopt;
    }
    // A head of d rows: HF's permute moves row (h, j, i2) of Meta's [heads, d/2, 2] to (h, i2, j).
    for (std::uint64_t d = 4; d <= matrix_rows; d += 2) {
      if (matrix_rows % d) continue;
      bool forward = true, inverse = true;
      for (std::uint64_t i = 0; i < rows && (forward || inverse); ++i) {
        const std::uint64_t base = i / d * d, r = i % d, half = d / 2;
        // forward: stored row (i2, j) = expected row (j, i2); inverse: stored (j, i2) = expected (i2, j)
        const std::uint64_t f = base + (r % half) * 2 + r / half, v = base + (r % 2) * half + r / 2;
        forward = forward && perm[i] == f;
        inverse = inverse && perm[i] == v;
      }
      if (forward || inverse) {
        Diagnosis g = make(forward ? "rope_permute" : "rope_unpermute", "");
        g.heads = matrix_rows / d;
        g.text = forward ? "rows permuted per head as Meta-to-Hugging-Face conversion does (transformers' permute, torchtitan's "
                           "to_hf), " + heads_text(*g.heads) + " of " + std::to_string(d) + " rows"
                         : "rows permuted per head into Meta's interleaved order (torchtitan's from_hf reverse permute), " +
                               heads_text(*g.heads) + " of " + std::to_string(d) + " rows";
        return g;
      }
    }
    for (std::uint64_t i = 0; i < rows; ++i)
      if (perm[i] != i)
        return make("rows_permuted", "the expected rows in another order, by no known rule (stored row " + std::to_string(i) +
                                         " is expected row " + std::to_string(perm[i]) + ")");
    return std::nullopt;
  }

  // The init of another seed: a few elements of every candidate first, then the whole tensor.
  std::optional<Diagnosis> seed_diagnosis(const Expected& e, const Bytes& have) {
    std::vector<std::uint64_t> seeds = found_seeds_;
    seeds.insert(seeds.end(), opts_.seeds.begin(), opts_.seeds.end());
    // The seed the checkpoint says it was made with, when it was compared with another.
    if (const auto it = r_.metadata().find("seed"); it != r_.metadata().end())
      if (const auto claimed = seed_of(it->second)) seeds.push_back(*claimed);
    for (std::uint64_t s = 0; s < 1024; ++s) seeds.push_back(s);
    for (std::uint64_t s : {1234ull, 12345ull, 1337ull, 31337ull, 3407ull, 2024ull, 2025ull, 2026ull, 0xffffffffull, ~0ull}) seeds.push_back(s);
    std::erase(seeds, seed_);
    const std::uint64_t probe = std::min<std::uint64_t>(e.numel(), 16), esize = dtype_size(e.dtype);
    if (probe == 0) return std::nullopt;
    Bytes heads(seeds.size() * probe * esize);
    std::vector<FillJob> jobs;
    for (std::size_t i = 0; i < seeds.size(); ++i) range_jobs(e, 0, probe, heads.data() + i * probe * esize, seeds[i], std::nullopt, jobs);
    fill_now(be_, jobs);
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      if (std::memcmp(heads.data() + i * probe * esize, have.data(), probe * esize) != 0) continue;
      if (expected_bytes(e, seeds[i]) != have) continue;
      if (std::find(found_seeds_.begin(), found_seeds_.end(), seeds[i]) == found_seeds_.end()) found_seeds_.push_back(seeds[i]);
      Diagnosis d = make("other_seed", "the init of seed " + std::to_string(seeds[i]) + ", not " + std::to_string(seed_));
      d.seed = seeds[i];
      return d;
    }
    return std::nullopt;
  }

  // An unexpected tensor: a copy of an expected tensor (renamed, or a tie kept), or missing tensors
  // fused or stacked into it.
  void diagnose_unexpected(Work& u) {
    const StoredTensor& s = r_.tensors()[u.stored.front()];
    const std::uint64_t esize = element_size(s);
    if (!esize || !s.dtype) return;
    if (!diagnosis_fits(saturating_mul(numel(s.shape), esize), u.check.diagnosis)) return;
    const Bytes have = stored_bytes(u.stored.front());
    u.stored_hash = content_hash(have.data(), have.size());
    // A constant matches every constant tensor of its size (norms): say what it is instead.
    if (auto d = constant_diagnosis(s, have)) {
      u.check.diagnosis = *d;
      return;
    }
    for (auto [a, z] = by_hash_.equal_range(*u.stored_hash); a != z; ++a) {
      Work& m = *a->second;
      if (m.expected->bytes() != have.size()) continue;
      if (m.check.status == CheckStatus::missing) {
        u.check.diagnosis = make("renamed", "holds the values of " + m.check.name + ", which is missing (renamed)");
        u.check.diagnosis->tensor = m.check.name;
        if (!m.check.diagnosis) {
          m.check.diagnosis = make("renamed", "its values are stored as " + u.check.name + " (renamed)");
          m.check.diagnosis->tensor = u.check.name;
        }
      } else {
        u.check.diagnosis = make("other_tensor", "holds the values of " + m.check.name + " (a copy, or a tie stored twice)");
        u.check.diagnosis->tensor = m.check.name;
      }
      return;
    }
    // Missing tensors as blocks of consecutive rows of this one (rows: its elements after dimension
    // 0 of the missing tensor).
    std::vector<std::string> found;
    std::map<std::uint64_t, std::unordered_multimap<std::uint64_t, std::uint64_t>> rows_by_length;
    for (Work& m : work_) {
      if (m.check.status != CheckStatus::missing || m.check.uncovered || m.expected->dtype != *s.dtype) continue;
      const Expected& e = *m.expected;
      if (e.shape.empty() || e.numel() == 0 || e.numel() >= numel(s.shape)) continue;
      const Shape tail(e.shape.begin() + 1, e.shape.end());
      if (tail.size() >= s.shape.size() || !std::equal(tail.rbegin(), tail.rend(), s.shape.rbegin())) continue;
      const std::uint64_t row = numel(tail) * esize;
      if (row == 0 || have.size() % row) continue;
      auto& rows = rows_by_length[row];
      if (rows.empty())
        for (std::uint64_t i = 0; i < have.size() / row; ++i) rows.emplace(content_hash(have.data() + i * row, row), i);
      const Bytes want = expected_bytes(e);
      for (auto [a, z] = rows.equal_range(content_hash(want.data(), row)); a != z; ++a) {
        const std::uint64_t at = a->second * row;
        if (at + want.size() > have.size() || std::memcmp(have.data() + at, want.data(), want.size()) != 0) continue;
        const std::uint64_t offset = at / esize;
        Diagnosis d = make("slice", "");
        d.tensor = u.check.name;
        d.offset = offset;
        const std::string where = slice_text(s.shape, e.shape, offset, d.index);
        d.text = "found in " + u.check.name + " at " + where + " (fused or stacked into it)";
        if (!m.check.diagnosis) m.check.diagnosis = d;
        found.push_back(e.name + " at " + where);
        break;
      }
    }
    if (!found.empty()) {
      Diagnosis d = make("slice", "holds missing tensors: ");
      for (std::size_t i = 0; i < found.size(); ++i) d.text += (i ? "; " : "") + found[i];
      d.tensor = found.front().substr(0, found.front().find(" at "));
      u.check.diagnosis = d;
    }
  }

  // Where a block of `part` (its rows, at element `offset`) sits in `whole`: "[3]" when it is one
  // index of the leading dimensions, else "[i, .., a:b]" in the dimension its rows run along.
  static std::string slice_text(const Shape& whole, const Shape& part, std::uint64_t offset, Shape& index) {
    const std::size_t k = whole.size() - part.size();  // whole's dimension that part's dimension 0 runs along
    const std::uint64_t row = numel(Shape(part.begin() + 1, part.end()));
    const std::uint64_t first_row = offset / row;  // in whole viewed as [..., whole[k], rest]
    const Shape lead(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(k + 1));
    const Shape at = coords_of(first_row, lead);
    std::string s = "[";
    for (std::size_t d = 0; d < k; ++d) s += std::to_string(at[d]) + ", ";
    if (at[k] == 0 && part[0] == whole[k]) {
      index.assign(at.begin(), at.begin() + static_cast<std::ptrdiff_t>(k));
      if (k == 0) return "[:]";
      s.resize(s.size() - 2);
      return s + "]";
    }
    return s + std::to_string(at[k]) + ":" + std::to_string(at[k] + part[0]) + "]";
  }

  const Builder& b_;
  CheckpointReader& r_;
  const VerifyOptions& opts_;
  backend& be_;
  std::uint64_t seed_;
  std::chrono::steady_clock::time_point t0_;
  VerifyProgress progress_;
  std::uint64_t bytes_read_ = 0;
  std::vector<Expected> expected_;
  std::vector<Work> work_, unexpected_;
  std::unordered_multimap<std::uint64_t, Work*> by_hash_;
  std::vector<std::uint64_t> found_seeds_;
  std::optional<std::uint64_t> diagnosis_memory_;  // what a diagnosis may take: read once, when the first needs it
  // compare()'s chunks: the one compared, the one being read, the one made.
  std::tuple<std::unique_ptr<unsigned char[]>, std::unique_ptr<unsigned char[]>, std::unique_ptr<unsigned char[]>> buffers_;
  const Work* ahead_ = nullptr;  // whose first chunk is being read into std::get<1>(buffers_)
  Beside beside_;                // after the buffers: joined before they are freed
};

nlohmann::ordered_json shape_json(const Shape& s) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (auto d : s) a.push_back(d);
  return a;
}

std::string hex(std::uint64_t v, std::uint64_t digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", static_cast<int>(digits), static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

namespace {
class CallbackReader final : public CheckpointReader {
 public:
  CallbackReader(std::string format, std::vector<StoredTensor> tensors, std::map<std::string, std::string> meta, TensorReadFn read)
      : format_(std::move(format)), tensors_(std::move(tensors)), meta_(std::move(meta)), read_(std::move(read)) {}
  std::string_view format() const override { return format_; }
  const std::vector<StoredTensor>& tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const override { return meta_; }
  void read(std::size_t k, std::uint64_t first, std::uint64_t n, void* out) override {
    LAYERINIT_EXPECTS(k < tensors_.size() && first <= numel(tensors_[k].shape) && n <= numel(tensors_[k].shape) - first,
                      "read: a range outside the tensor");
    read_(k, first, n, out);
  }

 private:
  std::string format_;
  std::vector<StoredTensor> tensors_;
  std::map<std::string, std::string> meta_;
  TensorReadFn read_;
};
}  // namespace

std::unique_ptr<CheckpointReader> callback_reader(std::string format, std::vector<StoredTensor> tensors,
                                                  std::map<std::string, std::string> metadata, TensorReadFn read) {
  return std::make_unique<CallbackReader>(std::move(format), std::move(tensors), std::move(metadata), std::move(read));
}

VerifyReport verify_checkpoint(const Builder& b, CheckpointReader& r, const VerifyOptions& opts) {
  return Verifier(b, r, opts).run();
}

std::optional<CheckpointClaim> claim_from_metadata(const std::map<std::string, std::string>& meta) {
  const auto spec = meta.find("model_spec");
  if (spec == meta.end() || spec->second.empty()) return std::nullopt;
  auto get = [&](const char* key) -> std::string {
    const auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  CheckpointClaim c;
  try {
    c.spec = spec_from_json(spec->second);
  } catch (const std::exception& e) {
    throw checkpoint_invalid(std::string("checkpoint metadata model_spec does not parse: ") + e.what());
  }
  auto pairs = [&](const char* key) {
    std::vector<std::pair<std::string, std::string>> out;
    const std::string text = get(key);
    if (text.empty()) return out;
    const auto j = nlohmann::json::parse(text, nullptr, false);
    bool ok = j.is_array();
    if (ok)
      for (const auto& p : j) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !p[1].is_string()) {
          ok = false;
          break;
        }
        out.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
      }
    if (!ok) throw checkpoint_invalid(std::string("checkpoint metadata ") + key + " is not a list of [pattern, value] pairs: " + printable(text, 80));
    return out;
  };
  if (const std::string d = get("dtype"); !d.empty()) c.options.dtype = d;
  c.options.init_overrides = pairs("init_overrides");
  c.options.dtype_overrides = pairs("dtype_overrides");
  if (const std::string r = get("recipe"); !r.empty()) c.options.recipe = r;
  if (const std::string s = get("seed"); !s.empty()) {
    const auto seed = seed_of(s);
    if (!seed) throw checkpoint_invalid("checkpoint metadata seed " + quote(s, 40) + " is not a number from 0 to 2^64 - 1");
    c.options.seed = *seed;
  }
  if (const std::string l = get("layout"); !l.empty()) c.options.layout = l;
  if (const std::string o = get("orientation"); !o.empty()) c.options.orientation = o;
  if (const std::string x = get("experts"); !x.empty()) c.options.experts = x;
  return c;
}

OptionsText claimed_options(const std::optional<CheckpointClaim>& claim, const GivenOptions& given) {
  OptionsText text = claim ? claim->options : OptionsText{};
  if (given.dtype) text.dtype = given.dtype;
  if (given.dtype_overrides) text.dtype_overrides = *given.dtype_overrides;
  if (given.recipe) text.recipe = *given.recipe;
  if (given.init_overrides) text.init_overrides = *given.init_overrides;
  if (given.seed) text.seed = *given.seed;
  if (given.layout) text.layout = *given.layout;
  if (given.orientation) text.orientation = *given.orientation;
  if (given.experts) text.experts = *given.experts;
  return text;
}

void check_same_model(const ModelSpec& spec, const Builder& b, const CheckpointReader& r, std::string_view shown) {
  std::unordered_map<std::string_view, std::uint64_t> stored;
  for (const StoredTensor& s : r.tensors()) stored.emplace(s.name, numel(s.global_shape.empty() ? s.shape : s.global_shape));
  std::uint64_t total = 0, present = 0;
  std::string first_missing;
  for_each_dataset(b, [&](DatasetSpec d, Part::Kind, std::optional<std::uint64_t>) {
    ++total;
    const auto it = stored.find(d.name);
    if (it != stored.end() && it->second == numel(d.shape)) ++present;
    else if (first_missing.empty()) first_missing = d.name + " " + shape_string(d.shape);
  });
  if (total == 0 || present * 2 >= total) return;
  std::string says;
  const auto& meta = r.metadata();
  if (const auto it = meta.find("model_spec"); it != meta.end()) {
    const auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (j.is_object() && j.contains("name") && j["name"].is_string()) says += "its metadata names model " + quote(j["name"].get<std::string>(), 80);
  }
  if (const auto it = meta.find("layout"); it != meta.end() && !it->second.empty())
    says += std::string(says.empty() ? "its metadata says" : ",") + " layout " + it->second;
  if (const auto it = meta.find("orientation"); it != meta.end() && !it->second.empty()) says += ", orientation " + it->second;
  const std::string have = r.tensors().empty() ? "no tensors"
                                               : "e.g. " + printable(r.tensors().front().name, 120) + " " +
                                                     shape_string(r.tensors().front().global_shape.empty() ? r.tensors().front().shape
                                                                                                           : r.tensors().front().global_shape);
  bad_argument("verify: checkpoint", std::string(shown),
               "is not of model " + quote(spec.name, 80) + " (" + std::string(b.options().layout == Layout::stacked ? "stacked" : "per-layer") +
                   ", " + std::string(orientation_name(b.options().orientation)) + "): " + std::to_string(present) + " of " +
                   std::to_string(total) + " of its tensors are there with their sizes (" + first_missing + " is not; the file has " +
                   have + ")" + (says.empty() ? "" : "; " + says) +
                   ": give the model, layout and orientation it was made with");
}

nlohmann::ordered_json verify_report_document(const VerifyReport& report) {
  nlohmann::ordered_json j;
  j["ok"] = report.ok();
  j["equal"] = report.equal;
  j["differs"] = report.differs;
  j["missing"] = report.missing;
  j["unexpected"] = report.unexpected;
  j["bytes_read"] = report.bytes_read;
  j["seconds"] = report.seconds;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const TensorCheck& t : report.tensors) {
    nlohmann::ordered_json o;
    o["name"] = t.name;
    o["status"] = std::string(check_status_name(t.status));
    if (t.status != CheckStatus::unexpected) o["expected"] = {{"shape", shape_json(t.expected_shape)}, {"dtype", t.expected_dtype}};
    if (t.status != CheckStatus::missing || t.pieces) {
      o["stored"] = {{"shape", shape_json(t.stored_shape)}, {"dtype", t.stored_dtype}, {"file", t.file}};
      if (t.pieces) o["stored"]["pieces"] = t.pieces;
    }
    if (t.status != CheckStatus::unexpected && t.status != CheckStatus::missing) {
      o["elements"] = t.elements;
      o["differing"] = t.differing;
    }
    if (t.uncovered) o["uncovered"] = t.uncovered;
    if (const auto& d = t.first_difference) {
      const std::uint64_t digits = t.expected_dtype == "fp32" ? 8 : 4;
      o["first_difference"] = {{"index", d->index},        {"coords", shape_json(d->coords)},
                               {"expected", d->expected},   {"stored", d->stored},
                               {"expected_bits", hex(d->expected_bits, digits)}, {"stored_bits", hex(d->stored_bits, digits)}};
    }
    if (const auto& d = t.diagnosis) {
      nlohmann::ordered_json g = {{"kind", d->kind}, {"text", d->text}};
      if (!d->tensor.empty()) g["tensor"] = d->tensor;
      if (d->heads) g["heads"] = *d->heads;
      if (d->seed) g["seed"] = *d->seed;
      if (d->offset) g["offset"] = *d->offset;
      if (!d->index.empty()) g["index"] = shape_json(d->index);
      if (d->dtype) g["dtype"] = std::string(dtype_name(*d->dtype));
      o["diagnosis"] = std::move(g);
    }
    tensors.push_back(std::move(o));
  }
  j["tensors"] = std::move(tensors);
  return j;
}

std::string verify_report_json(const VerifyReport& report, int indent) {
  return verify_report_document(report).dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string verify_report_text(const VerifyReport& report, bool all) {
  std::string out;
  for (const TensorCheck& t : report.tensors) {
    if (t.status == CheckStatus::equal && !all) continue;
    std::string line = std::string(check_status_name(t.status));
    line.resize(11, ' ');
    line += printable(t.name, 200);
    switch (t.status) {
      case CheckStatus::equal:
        line += " " + shape_string(t.expected_shape) + " " + t.expected_dtype;
        break;
      case CheckStatus::missing:
        line += " " + shape_string(t.expected_shape) + " " + t.expected_dtype;
        if (t.uncovered) line += ": " + std::to_string(t.uncovered) + " of its elements are in no rank file";
        break;
      case CheckStatus::unexpected:
        line += " " + shape_string(t.stored_shape) + " " + printable(t.stored_dtype, 20);
        break;
      case CheckStatus::differs:
        line += " " + shape_string(t.expected_shape) + " " + t.expected_dtype;
        if (t.stored_shape != t.expected_shape || t.stored_dtype != t.expected_dtype)
          line += ": stored " + shape_string(t.stored_shape) + " " + printable(t.stored_dtype, 20);
        else if (t.first_difference)
          line += ": " + std::to_string(t.differing) + " of " + std::to_string(t.elements) + " elements differ, first " +
                  shape_string(t.first_difference->coords) + ": " + number(t.first_difference->stored) + " stored, " +
                  number(t.first_difference->expected) + " expected";
        break;
    }
    if (t.diagnosis) line += "; " + printable(t.diagnosis->text, 400);
    out += line + "\n";
  }
  const std::uint64_t n = report.equal + report.differs + report.missing + report.unexpected;
  out += std::to_string(n) + (n == 1 ? " tensor: " : " tensors: ") + std::to_string(report.equal) + " equal, " +
         std::to_string(report.differs) + (report.differs == 1 ? " differs, " : " differ, ") + std::to_string(report.missing) +
         " missing, " + std::to_string(report.unexpected) + " unexpected\n";
  return out;
}

}  // namespace layerinit
