// Host fill rate of layerinit: values per second for each dtype x fill kind, on 1 thread and on all
// threads, through the public API (make_fill_job + fill_host). A plain timed loop: one warm-up fill
// (it also faults the pages in), then --reps timed fills of the same buffer; the median is reported.
// Beside wall time, the process's CPU time (all threads): on a loaded machine values per CPU second
// still measure the code (with 1 thread, the cycles one core spends), where wall time does not.
// --isa x86-64|x86-64-v3|x86-64-v4 runs the loops of one instruction-set level (fill_host_range, the
// calling thread only) instead of the best level through fill_host.
// Output: CSV on stdout, one row per (dtype, kind, threads):
//   impl,dtype,kind,threads,n,reps,median_s,min_s,values_per_s,cpu_median_s,values_per_cpu_s
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <ctime>
#include <optional>
#include <vector>

#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/kernels/fill_host_seams.hpp>

using namespace layerinit;

namespace {

struct Args {
  std::uint64_t n = 1ull << 25;  // values per fill
  int reps = 7;
  std::vector<int> threads;      // default: 1 and all cores
  std::vector<std::string> dtypes{"bf16", "fp16", "fp32"};
  std::vector<std::string> kinds{"normal", "trunc_normal", "uniform"};
  std::string isa;               // empty: fill_host at the best level
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (b <= s.size()) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

DType dtype_of(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  if (s == "fp32") return DType::f32;
  std::fprintf(stderr, "fill_rate: unknown dtype '%s' (valid: bf16, fp16, fp32)\n", s.c_str());
  std::exit(2);
}

FillSpec spec_of(const std::string& s) {
  if (s == "normal") return FillSpec::normal(0.0, 0.02);
  if (s == "trunc_normal") return FillSpec::trunc_normal(0.0, 0.02, -0.04, 0.04);
  if (s == "uniform") return FillSpec::uniform(-0.02, 0.02);
  std::fprintf(stderr, "fill_rate: unknown kind '%s' (valid: normal, trunc_normal, uniform)\n", s.c_str());
  std::exit(2);
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "fill_rate: %s needs a value\n", k.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (k == "--n") a.n = std::strtoull(val().c_str(), nullptr, 10);
    else if (k == "--reps") a.reps = std::atoi(val().c_str());
    else if (k == "--threads") { a.threads.clear(); for (auto& t : split(val())) a.threads.push_back(std::atoi(t.c_str())); }
    else if (k == "--dtypes") a.dtypes = split(val());
    else if (k == "--kinds") a.kinds = split(val());
    else if (k == "--isa") a.isa = val();
    else {
      std::fprintf(stderr, "usage: fill_rate [--n VALUES] [--reps R] [--threads 1,2] [--dtypes bf16,fp16,fp32] "
                           "[--kinds normal,trunc_normal,uniform] [--isa x86-64|x86-64-v3|x86-64-v4]\n");
      return 2;
    }
  }
  std::optional<HostIsa> isa;
  for (HostIsa i : supported_host_isas())
    if (host_isa_name(i) == a.isa) isa = i;
  if (!a.isa.empty() && !isa) {
    std::fprintf(stderr, "fill_rate: this CPU cannot run --isa '%s'\n", a.isa.c_str());
    return 2;
  }
  if (isa) a.threads = {1};
  if (a.threads.empty()) a.threads = {1, default_thread_count()};
  if (a.reps < 1 || a.n == 0) { std::fprintf(stderr, "fill_rate: --reps and --n must be positive\n"); return 2; }

  std::vector<unsigned char> buf(a.n * 4);
  std::printf("impl,dtype,kind,threads,n,reps,median_s,min_s,values_per_s,cpu_median_s,values_per_cpu_s\n");
  for (const auto& ds : a.dtypes) {
    const DType t = dtype_of(ds);
    for (const auto& ks : a.kinds) {
      const FillJob job = make_fill_job(buf.data(), t, a.n, 1234, "bench.weight", spec_of(ks));
      auto run = [&](int th) {
        if (isa) fill_host_range(job, 0, a.n, *isa);
        else fill_host({&job, 1}, th);
      };
      for (int th : a.threads) {
        run(th);  // warm-up
        std::vector<double> s, cpu;
        for (int r = 0; r < a.reps; ++r) {
          const double c0 = cpu_seconds();
          const auto t0 = std::chrono::steady_clock::now();
          run(th);
          s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          cpu.push_back(cpu_seconds() - c0);
        }
        std::sort(s.begin(), s.end());
        std::sort(cpu.begin(), cpu.end());
        const double med = s[s.size() / 2], cpu_med = cpu[cpu.size() / 2];
        std::printf("layerinit,%s,%s,%d,%llu,%d,%.6f,%.6f,%.4e,%.6f,%.4e\n", ds.c_str(), ks.c_str(), th,
                    static_cast<unsigned long long>(a.n), a.reps, med, s.front(), a.n / med, cpu_med, a.n / cpu_med);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
