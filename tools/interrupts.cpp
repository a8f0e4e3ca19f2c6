// SIGINT, SIGTERM and SIGHUP for every command (tools/commands.hpp): main installs the handlers
// first, emit asks for a cancel instead of an exit once it has a temporary to remove.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "commands.hpp"

namespace layerinit::cli {
namespace {

std::atomic<bool> g_cancel{false};
std::atomic<bool> g_later{false};  // interrupt_later() was called
std::atomic<bool> g_silent{false};  // interrupts_quiet() was called
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler reads these");

// Only async-signal-safe calls: write(2) and _exit(2).
extern "C" void on_signal(int) {
  if (g_later.load()) {
    g_cancel.store(true);
    return;
  }
  if (!g_silent.load()) {
    static const char line[] = "layerinit: interrupted\n";
    const ssize_t n = ::write(STDERR_FILENO, line, sizeof line - 1);
    (void)n;
  }
  ::_exit(130);
}

}  // namespace

std::atomic<bool>& emit_cancel() { return g_cancel; }

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigset_t ours;
  sigemptyset(&ours);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction was {};
    // `nohup layerinit ...` asks that a hangup be ignored: kept so.
    if (sig == SIGHUP && sigaction(sig, nullptr, &was) == 0 && was.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
    sigaddset(&ours, sig);
  }
  // A blocked signal survives exec, blocked: a launcher that starts us so would have its Ctrl-C or
  // kill wait until exit. Handled now, they may arrive (one already pending arrives here).
  pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
}

void interrupts_quiet() { g_silent.store(true); }

void interrupts_decided() {
  // Ignored, not handled: a handler would interrupt the write of the line (lost, or followed by
  // "interrupted"); an ignored signal interrupts nothing.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
}

void interrupt_later() { g_later.store(true); }

}  // namespace layerinit::cli
