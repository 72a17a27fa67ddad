// torch's AOTInductor package loader as a TorchScript class, `torch.classes.yggc.PackageRunnerV2` (V1 without
// `verify_tree`, for what asks for it by that name).
//
// Why: the loader's own Python binding (torch._C._aoti.AOTIModelPackageLoader) holds the GIL for the whole
// model call, a whole CPU forward in which no other Python thread of the process runs (an HTTP server's
// event loop included). A script object's methods let go of the GIL while they run, so the same loader called
// through this class leaves the interpreter to the other threads. Same loader, same compiled code, same bits.
#include <ATen/core/Dict.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace yggc {  // verify_tree.cpp
std::vector<at::Tensor> verify_tree_inputs(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& depth,
                                           const at::Tensor& cum_logp, const at::Tensor& anc, int64_t n, int64_t view,
                                           int64_t verify);
std::vector<at::Tensor> verify_tree_accept(const at::Tensor& logits, const at::Tensor& sub_tokens, const at::Tensor& rows,
                                           const at::Tensor& sub_anc, int64_t n, int64_t depth,
                                           const std::optional<at::Tensor>& kv_pool, at::TensorList per_row);
}  // namespace yggc

namespace {

constexpr const char* kModelName = "model";  // the name aoti_compile_and_package gives the one model in a package

std::unordered_map<std::string, at::Tensor> as_map(const c10::Dict<std::string, at::Tensor>& dict) {
  std::unordered_map<std::string, at::Tensor> map;
  for (const auto& item : dict) map.emplace(item.key(), item.value());
  return map;
}

struct PackageRunner : torch::CustomClassHolder {
  torch::inductor::AOTIModelPackageLoader loader;

  explicit PackageRunner(const std::string& path) : loader(path, kModelName, false, 1, -1) {}

  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs) { return loader.boxed_run(std::move(inputs)); }

  std::vector<std::string> call_spec() { return loader.get_call_spec(); }

  std::vector<std::string> constant_fqns() { return loader.get_constant_fqns(); }

  // constants by their original names (FQNs), copied unless user_managed (then read in place)
  void load_constants(const c10::Dict<std::string, at::Tensor>& constants, bool check_full_update,
                      bool user_managed) {
    auto map = as_map(constants);
    loader.load_constants(map, false, check_full_update, user_managed);
  }

  // every constant by its internal name, read in place (the caller keeps the tensors alive)
  void bind_constants(const c10::Dict<std::string, at::Tensor>& constants) {
    auto map = as_map(constants);
    loader.update_constant_buffer(map, false, true, true);
  }
};

// V2 adds the greedy verify phase in one call (runtime/verify_phase.py's forward_ops, fused): prune the tree, run
// the verifier's package on the kept rows (`tail`: the caches and fed tensors its inputs end with), accept, move the
// K/V -> verify_tree_accept's outputs, the path rows of the package's outputs after the logits last where
// `per_row` (an EAGLE-3 verifier's features). Same ops, same package, same bits as the three calls it replaces.
struct PackageRunnerV2 : PackageRunner {
  using PackageRunner::PackageRunner;

  std::vector<at::Tensor> verify_tree(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& depth,
                                      const at::Tensor& cum_logp, const at::Tensor& anc, int64_t n, int64_t view,
                                      int64_t verify, int64_t tree_depth, std::vector<at::Tensor> tail,
                                      const std::optional<at::Tensor>& kv_pool, bool per_row) {
    auto in = yggc::verify_tree_inputs(tokens, parents, depth, cum_logp, anc, n, view, verify);
    std::vector<at::Tensor> args{in[0], in[1], in[2], in[3]};  // sub_tokens, positions, slots, mask
    args.insert(args.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
    auto out = loader.boxed_run(std::move(args));  // [logits, features...]
    const std::vector<at::Tensor> rows(per_row ? out.begin() + 1 : out.end(), out.end());
    return yggc::verify_tree_accept(out[0], in[0], in[4], in[5], n, tree_depth, kv_pool, rows);
  }
};

}  // namespace

namespace yggc {

// Registers each class unless the process has it (another build of this library registered it first).
void register_package_runner(std::vector<std::unique_ptr<torch::Library>>& held) {
  if (!torch::getCustomClass("__torch__.torch.classes.yggc.PackageRunnerV1")) {
    held.push_back(std::make_unique<torch::Library>(torch::Library::FRAGMENT, "yggc", std::nullopt, __FILE__, __LINE__));
    held.back()
        ->class_<PackageRunner>("PackageRunnerV1")
        .def(torch::init<std::string>())
        .def("run", &PackageRunner::run)
        .def("call_spec", &PackageRunner::call_spec)
        .def("constant_fqns", &PackageRunner::constant_fqns)
        .def("load_constants", &PackageRunner::load_constants)
        .def("bind_constants", &PackageRunner::bind_constants);
  }
  using V2 = c10::intrusive_ptr<PackageRunnerV2>;
  if (!torch::getCustomClass("__torch__.torch.classes.yggc.PackageRunnerV2")) {
    held.push_back(std::make_unique<torch::Library>(torch::Library::FRAGMENT, "yggc", std::nullopt, __FILE__, __LINE__));
    held.back()
        ->class_<PackageRunnerV2>("PackageRunnerV2")  // V1's methods, bound to this class (a base's member
        .def(torch::init<std::string>())                  // pointer would bind them to V1's)
        .def("run", [](const V2& self, std::vector<at::Tensor> inputs) { return self->run(std::move(inputs)); })
        .def("call_spec", [](const V2& self) { return self->call_spec(); })
        .def("constant_fqns", [](const V2& self) { return self->constant_fqns(); })
        .def("load_constants", [](const V2& self, const c10::Dict<std::string, at::Tensor>& constants,
                                  bool check_full_update, bool user_managed) {
          self->load_constants(constants, check_full_update, user_managed);
        })
        .def("bind_constants", [](const V2& self, const c10::Dict<std::string, at::Tensor>& constants) {
          self->bind_constants(constants);
        })
        .def("verify_tree", &PackageRunnerV2::verify_tree);
  }
}

}  // namespace yggc
