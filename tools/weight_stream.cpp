// Harness of tools/bench_weight_stream.py: yggc's AVX512-BF16 GEMM micro-kernel and its entry, rendered from
// passes/kernels into KERNEL_SOURCE as a compile renders them (yggc_gemm: passes of at most 10 rows, two in chunks,
// the next weights prefetched), over packed weights streamed from memory; and the kernel's arithmetic alone,
// the same row passes over one block that stays in L1, nothing prefetched.
//
//   weight_stream time MB ROWS... REPEATS   -> one line per (rows, mode): "rows stream|arithmetic ms"
//   weight_stream check                     -> "max_error invariant" of yggc_gemm at rows 1..16 against float64
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <vector>
#include <c10/util/Unroll.h>

#define YGGC_CHECK(ok, message) \
  if (!(ok)) {                  \
    std::puts(message);         \
    std::abort();               \
  }

#include KERNEL_SOURCE

namespace {

using bf16 = uint16_t;
constexpr int64_t kK = 576, kN = 32;  // SmolLM2's hidden size; one packed column block [K / 2, 32, 2]
constexpr int64_t kBlock = kK * kN;   // bf16 per block

float widen(bf16 x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bf16 random_bf16(uint32_t& state) {  // values in [1, 2) with random mantissas (7 bits), either sign
  state = state * 1664525u + 1013904223u;
  return static_cast<bf16>(0x3f80 | (state >> 24 & 0x7f) | (state >> 16 & 0x8000));
}

template <int64_t R>
void call(const bf16* A, const bf16* B, float* C) {
  yggc_gemm_kernel<R, kN, false>(A, B, C, kK, kK, kN, kN, nullptr, 0);
}

// the arithmetic alone: C [M, 32] = A [M, K] x one block in the entry's row passes, without its prefetch
void arithmetic(int M, const bf16* A, const bf16* B, float* C) {
  static constexpr void (*kernels[])(const bf16*, const bf16*, float*) = {
      call<1>, call<2>, call<3>, call<4>, call<5>, call<6>, call<7>, call<8>, call<9>, call<10>};
  const int passes = (M + 9) / 10;
  for (int pass = 0, m = 0; pass < passes; ++pass) {
    const int rows = (M - m + passes - pass - 1) / (passes - pass);
    kernels[rows - 1](A + m * kK, B, C + m * kN);
    m += rows;
  }
}

// the compiled entry over one block [K / 2, 32, 2]; the blocks lie one after another, as the template packs them
void gemm(int M, const bf16* A, const bf16* B, float* C) { yggc_gemm<false>(A, B, C, M, kN, kK, kK, kN, kN); }

// ms for M rows over `blocks` blocks, the two threads taking halves; resident: every call reads the thread's one block
double pass_ms(int M, const bf16* weights, int64_t blocks, const bf16* A, bool resident) {
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(2)
  {
    std::vector<float> C(16 * kN);
    const int t = omp_get_thread_num();
    const int64_t first = blocks * t / 2, end = blocks * (t + 1) / 2;
    for (int64_t b = first; b < end; ++b) {
      if (resident) {
        arithmetic(M, A, weights + first * kBlock, C.data());
      } else {
        gemm(M, A, weights + b * kBlock, C.data());
      }
    }
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int time_modes(int64_t megabytes, const std::vector<int>& rows, int repeats) {
  const int64_t blocks = megabytes * 1000000 / (kBlock * 2);
  bf16* weights = static_cast<bf16*>(std::aligned_alloc(64, (blocks + 1) * kBlock * 2));
  uint32_t state = 1;
  for (int64_t i = 0; i < (blocks + 1) * kBlock; ++i) weights[i] = random_bf16(state);
  std::vector<bf16> A(16 * kK);
  for (auto& a : A) a = random_bf16(state);
  for (int r = 0; r < repeats; ++r)  // rows and modes take turns: a shared VM's memory speed drifts
    for (int M : rows)
      for (bool resident : {false, true})
        std::printf("%d %s %.4f\n", M, resident ? "arithmetic" : "stream",
                    pass_ms(M, weights, blocks, A.data(), resident));
  std::free(weights);
  return 0;
}

int check() {
  std::vector<bf16> A(16 * kK), B(2 * kBlock);
  uint32_t state = 7;
  for (auto& a : A) a = random_bf16(state);
  for (auto& b : B) b = random_bf16(state);
  std::vector<float> one(16 * kN), C(16 * kN);
  for (int r = 0; r < 16; ++r) gemm(1, A.data() + r * kK, B.data(), one.data() + r * kN);
  double worst = 0;
  bool invariant = true;
  for (int M = 1; M <= 16; ++M) {
    gemm(M, A.data(), B.data(), C.data());
    for (int r = 0; r < M; ++r)
      for (int n = 0; n < kN; ++n) {
        double ref = 0;  // B [K / 2, 32, 2]: pair p of column n at (p * 32 + n) * 2
        for (int64_t k = 0; k < kK; ++k) ref += double(widen(A[r * kK + k])) * widen(B[(k / 2 * kN + n) * 2 + k % 2]);
        worst = std::max(worst, std::abs(C[r * kN + n] - ref) / (1 + std::abs(ref)));
        invariant &= std::memcmp(&C[r * kN + n], &one[r * kN + n], 4) == 0;
      }
  }
  std::printf("%.3g %d\n", worst, invariant ? 1 : 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "check") == 0) return check();
  if (argc < 5 || std::strcmp(argv[1], "time") != 0) return 2;
  std::vector<int> rows;
  for (int i = 3; i < argc - 1; ++i) rows.push_back(std::atoi(argv[i]));
  return time_modes(std::atoll(argv[2]), rows, std::atoi(argv[argc - 1]));
}
