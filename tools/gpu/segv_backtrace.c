/* LD_PRELOAD helper for tools/gpu_smoke_variants.py: on SIGSEGV, SIGBUS or SIGILL, print the fault address
 * and the native stack (glibc backtrace, library + offset or exported symbol) to stderr, then die of the
 * same signal. Python's faulthandler, when enabled, runs first and chains to this handler. */
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static void put(const char *s) { (void)!write(2, s, strlen(s)); }

static void put_hex(uintptr_t v) {
    char buf[2 + 2 * sizeof v + 1] = "0x";
    for (int i = 0; i < (int)(2 * sizeof v); i++)
        buf[2 + i] = "0123456789abcdef"[(v >> (4 * (2 * sizeof v - 1 - i))) & 15];
    buf[sizeof buf - 1] = 0;
    put(buf);
}

static void on_fault(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    void *frames[64];
    int n = backtrace(frames, 64);
    put("native backtrace: signal ");
    put(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGILL");
    put(" at address ");
    put_hex((uintptr_t)info->si_addr);
    put("\n");
    backtrace_symbols_fd(frames, n, 2);
    put("native backtrace: end\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void install(void) {
    void *warm[1];
    backtrace(warm, 1); /* loads the unwinder now, not inside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, 0);
    sigaction(SIGBUS, &sa, 0);
    sigaction(SIGILL, &sa, 0);
}
