// torch's AOTInductor package loader as a TorchScript class, `torch.classes.yggc.PackageRunnerV1`.
//
// Why: the loader's own Python binding (torch._C._aoti.AOTIModelPackageLoader) holds the GIL for the whole
// model call, 10-40 ms of a CPU forward in which no other Python thread of the process runs (an HTTP server's
// event loop included). A script object's methods let go of the GIL while they run, so the same loader called
// through this class leaves the interpreter to the other threads. Same loader, same compiled code, same bits.
#include <ATen/core/Dict.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

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

}  // namespace

namespace yggc {

// Registers the class unless the process has it (another build of this library registered it first).
void register_package_runner(std::vector<std::unique_ptr<torch::Library>>& held) {
  if (torch::getCustomClass("__torch__.torch.classes.yggc.PackageRunnerV1")) return;
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

}  // namespace yggc
