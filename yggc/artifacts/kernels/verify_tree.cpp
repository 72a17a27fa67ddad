// The greedy verify phase's tree work on the CPU, as two ops around the verifier's call: yggc::verify_tree_inputs_v1
// (prune to the V best nodes, the verifier's inputs and tree mask) and yggc::verify_tree_accept_v1 (each row's
// argmax, the deepest accepted row, the accepted path, the K/V moves). runtime/verify_phase.py calls them where
// the process has them, else tree/verify_host.py's Python functions, whose results they give integer for integer.
//
// Why: right after the verifier's package has streamed its weights through the caches, every Python and NumPy
// step of that work runs cold, and together they make most of an iteration's host time (docs/benchmarks/
// host-costs.md). Here the same work is a handful of cache misses.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

std::vector<int64_t> longs(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.scalar_type() == at::kLong, name, " must be a 1-d int64 tensor");
  auto c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

at::Tensor long_tensor(const std::vector<int64_t>& values) {
  auto out = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), out.data_ptr<int64_t>());
  return out;
}

// The maximum of row[0, n), NaN if any element is NaN.
float max_of(const float* row, int64_t n) {
  Vec acc(-INFINITY);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) acc = at::vec::maximum(acc, Vec::loadu(row + i));  // NaN wins
  float lanes[Vec::size()], best = -INFINITY;
  acc.store(lanes);
  for (float v : lanes) best = std::isnan(v) || std::isnan(best) ? NAN : std::max(best, v);
  for (; i < n; ++i) best = std::isnan(row[i]) || std::isnan(best) ? NAN : std::max(best, row[i]);
  return best;
}

// A row's first index of its maximum, NaN counting as the maximum (torch.argmax, NumPy's argmax): each chunk's
// maximum in parallel, then the first element equal to the greatest in the first chunk that holds it.
int64_t first_argmax(const float* row, int64_t n) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> maxima(chunks);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) maxima[c] = max_of(row + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  int64_t first = 0;
  for (int64_t c = 1; c < chunks && !std::isnan(maxima[first]); ++c)
    if (std::isnan(maxima[c]) || maxima[c] > maxima[first]) first = c;
  const float best = chunks ? maxima[first] : 0.0f;
  for (int64_t j = first * kChunk; j < n; ++j)
    if (std::isnan(best) ? std::isnan(row[j]) : row[j] == best) return j;
  return 0;
}

}  // namespace

namespace yggc {

// tokens, parents, depth [N] int64, cum_logp [N] float, anc [N, N] bool; n: the root's slot; view: the cache
// slots a row may see; verify: V -> sub_tokens, positions, slots [V+1] int64, mask [V+1, view] bool,
// rows [3, V+1] int64 (kept tree ids, parent rows with -1 at the root, depths), sub_anc [V+1, V+1] bool.
// Kept: the root and the V best nodes by the least cum_logp along their path (ties: shallower, then lower id),
// parents before children.
std::vector<at::Tensor> verify_tree_inputs(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& depth,
                                           const at::Tensor& cum_logp, const at::Tensor& anc, int64_t n, int64_t view,
                                           int64_t verify) {
  const auto tok = longs(tokens, "tokens"), par = longs(parents, "parents"), dep = longs(depth, "depth");
  const int64_t N = static_cast<int64_t>(tok.size());
  TORCH_CHECK(par.size() == tok.size() && dep.size() == tok.size() && cum_logp.numel() == N,
              "tree tensors differ in length");
  TORCH_CHECK(anc.dim() == 2 && anc.size(0) == N && anc.size(1) == N && anc.scalar_type() == at::kBool,
              "anc must be [N, N] bool");
  TORCH_CHECK(verify >= 0 && verify < N, "verify ", verify, " needs more than ", N, " tree nodes");
  const auto lp_t = cum_logp.to(at::kDouble).contiguous();
  const double* lp = lp_t.data_ptr<double>();
  // a node's key: the least cum_logp along its path (prune.rank_nodes), so no node outranks its parent (a suffix
  // branch's price may exceed the model node above it); the node's own cum_logp where it only falls along paths
  std::vector<int64_t> by_depth(N);
  std::iota(by_depth.begin(), by_depth.end(), 0);
  std::stable_sort(by_depth.begin(), by_depth.end(), [&](int64_t a, int64_t b) { return dep[a] < dep[b]; });
  std::vector<double> key(N);
  for (int64_t i : by_depth) {
    const double own = std::isnan(lp[i]) ? -INFINITY : lp[i];
    key[i] = par[i] >= 0 && par[i] < N && i > 0 ? std::min(own, key[par[i]]) : own;
  }
  auto score = [&](int64_t i) { return key[i]; };
  std::vector<int64_t> ranked(N - 1);
  std::iota(ranked.begin(), ranked.end(), 1);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) {
    return score(a) != score(b) ? score(a) > score(b) : dep[a] < dep[b];
  });
  std::vector<int64_t> kept(ranked.begin(), ranked.begin() + verify);
  std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) { return dep[a] != dep[b] ? dep[a] < dep[b] : a < b; });
  kept.insert(kept.begin(), 0);
  const int64_t R = verify + 1;
  std::vector<int64_t> row_of(N, -1);
  for (int64_t r = 0; r < R; ++r) row_of[kept[r]] = r;

  auto rows = at::empty({3, R}, at::kLong), sub_tokens = at::empty({R}, at::kLong);
  auto positions = at::empty({R}, at::kLong), slots = at::empty({R}, at::kLong);
  int64_t *ids = rows.data_ptr<int64_t>(), *sub_par = ids + R, *sub_depth = ids + 2 * R;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t node = kept[r], p = par[node];
    ids[r] = node;
    sub_par[r] = p >= 0 && p < N ? row_of[p] : -1;
    sub_depth[r] = dep[node];
    sub_tokens.data_ptr<int64_t>()[r] = tok[node];
    positions.data_ptr<int64_t>()[r] = n + dep[node];
    slots.data_ptr<int64_t>()[r] = n + r;
  }
  const auto anc_c = anc.contiguous();
  const bool* a = anc_c.data_ptr<bool>();
  auto sub_anc = at::empty({R, R}, at::kBool), mask = at::zeros({R, view}, at::kBool);
  bool *sa = sub_anc.data_ptr<bool>(), *m = mask.data_ptr<bool>();
  const int64_t seen = std::clamp<int64_t>(n, 0, view), width = std::clamp<int64_t>(view - n, 0, R);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < R; ++c) sa[r * R + c] = a[kept[r] * N + kept[c]];
    std::fill(m + r * view, m + r * view + seen, true);
    std::copy(sa + r * R, sa + r * R + width, m + r * view + seen);
  }
  return {sub_tokens, positions, slots, mask, rows, sub_anc};
}

// logits [R, vocab] of verify_tree_inputs' rows; sub_tokens [R]; rows [3, R]; sub_anc [R, R]; n: the root's slot;
// depth: D; kv_pool: the verifier's K/V [layers, 2, kv_heads, slots, head_dim], where it has one; per_row: tensors
// [R, ...] of the rows (the verifier's features) ->
// emitted tokens [L] (the accepted path, the bonus at index k, then padding; L = min(D, R - 1) + 1),
// info [3] = (k, the deepest accepted node's tree id, the deepest row's depth), the deepest accepted row's logits
// [vocab] (a view), the drafter's K/V moves [2, L - 1], path rows [L] (the accepted rows root first, then the
// others), the verifier's K/V moves [2, L - 1]; moves past k are no-ops (dst onto dst). With kv_pool the verifier's
// moves are made in it (those of a slot onto itself skipped), as graphs/llama.py's move_kv; then each per_row
// tensor's path rows.
std::vector<at::Tensor> verify_tree_accept(const at::Tensor& logits, const at::Tensor& sub_tokens, const at::Tensor& rows,
                                           const at::Tensor& sub_anc, int64_t n, int64_t depth,
                                           const std::optional<at::Tensor>& kv_pool, at::TensorList per_row) {
  const auto tok = longs(sub_tokens, "sub_tokens");
  const int64_t R = static_cast<int64_t>(tok.size());
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == 3 && rows.size(1) == R && rows.scalar_type() == at::kLong,
              "rows must be [3, R] int64");
  TORCH_CHECK(logits.dim() == 2 && logits.size(0) == R, "logits must be [R, vocab]");
  TORCH_CHECK(sub_anc.dim() == 2 && sub_anc.size(0) == R && sub_anc.size(1) == R && sub_anc.scalar_type() == at::kBool,
              "sub_anc must be [R, R] bool");
  const auto rows_c = rows.contiguous();
  const int64_t *ids = rows_c.data_ptr<int64_t>(), *sub_par = ids + R, *sub_depth = ids + 2 * R;
  // each row's argmax only where acceptance reads it: the accepted rows' (the others' children are rejected anyway)
  const auto scores = logits.scalar_type() == at::kFloat ? logits.contiguous() : logits.to(at::kFloat).contiguous();
  const float* data = scores.data_ptr<float>();
  const int64_t vocab = scores.size(1);
  std::vector<int64_t> best(R, -1);
  auto best_of = [&](int64_t r) { return best[r] >= 0 ? best[r] : best[r] = first_argmax(data + r * vocab, vocab); };
  std::vector<char> accepted(R, 1);
  int64_t deepest = 0;
  for (int64_t r = 1; r < R; ++r) {
    const int64_t p = sub_par[r];  // a kept row's parent is kept: -1 only at the root
    accepted[r] = p >= 0 && accepted[p] && tok[r] == best_of(p);
    if (accepted[r] && sub_depth[r] > sub_depth[deepest]) deepest = r;
  }
  const auto anc_c = sub_anc.contiguous();
  const bool* on_path = anc_c.data_ptr<bool>() + deepest * R;
  std::vector<int64_t> key(R), path(R);
  for (int64_t r = 0; r < R; ++r) key[r] = on_path[r] ? sub_depth[r] : depth + 1 + r;
  std::iota(path.begin(), path.end(), 0);
  std::stable_sort(path.begin(), path.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  const int64_t L = std::min(depth, R - 1) + 1, k = sub_depth[deepest];
  path.resize(L);

  std::vector<int64_t> emit(L), vsrc(L - 1), dsrc(L - 1), dst(L - 1);
  for (int64_t i = 0; i < L; ++i) emit[i] = i == k ? best_of(deepest) : tok[path[(i + 1) % L]];
  for (int64_t i = 0; i + 1 < L; ++i) {
    dst[i] = n + 1 + i;
    vsrc[i] = i < k ? n + path[i + 1] : dst[i];
    dsrc[i] = i < k ? n + ids[path[i + 1]] : dst[i];
  }
  const int64_t max_depth = *std::max_element(sub_depth, sub_depth + R);
  if (kv_pool.has_value()) {
    std::vector<int64_t> src, to;
    for (int64_t i = 0; i + 1 < L; ++i)
      if (vsrc[i] != dst[i]) src.push_back(vsrc[i]), to.push_back(dst[i]);
    if (!src.empty()) kv_pool->index_copy_(3, long_tensor(to), kv_pool->index_select(3, long_tensor(src)));
  }
  auto moves = [&](const std::vector<int64_t>& from) { return at::stack({long_tensor(from), long_tensor(dst)}); };
  const auto path_t = long_tensor(path);
  std::vector<at::Tensor> out{long_tensor(emit), long_tensor({k, ids[deepest], max_depth}), logits.select(0, deepest),
                              moves(dsrc), path_t, moves(vsrc)};
  for (const auto& t : per_row) out.push_back(t.index_select(0, path_t));
  return out;
}

}  // namespace yggc
