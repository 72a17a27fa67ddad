// Registration of yggc's CPU ops, on request: artifacts/kernel_ops.py calls yggc_register_ops() after it opens the
// library, and each op is registered only if the process has not got it (it may hold another build's already;
// defining an op twice aborts a process, which is why nothing here registers as the library loads).
//
// An op's name carries its version: a package calls it by name, and a process may hold bundles compiled against
// different versions of the kernels. Bump it with any change to the arithmetic or to a layout the op takes.
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace yggc {
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask);
at::Tensor attend_rows_v2(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask);
at::Tensor attend_rows_v1(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask);
at::Tensor tied_head(const at::Tensor& x, const at::Tensor& packed, int64_t vocab);
at::Tensor quant_linear(const at::Tensor& x, const at::Tensor& packed, int64_t format, int64_t n);  // quant_linear.cpp
std::vector<at::Tensor> verify_tree_inputs(const at::Tensor& tokens, const at::Tensor& parents, const at::Tensor& depth,
                                           const at::Tensor& cum_logp, const at::Tensor& anc, int64_t n, int64_t view,
                                           int64_t verify);  // verify_tree.cpp
std::vector<at::Tensor> verify_tree_accept(const at::Tensor& logits, const at::Tensor& sub_tokens, const at::Tensor& rows,
                                           const at::Tensor& sub_anc, int64_t n, int64_t depth,
                                           const std::optional<at::Tensor>& kv_pool, at::TensorList per_row);
void register_package_runner(std::vector<std::unique_ptr<torch::Library>>& held);  // package_runner.cpp
}  // namespace yggc

namespace {

std::vector<std::unique_ptr<torch::Library>>& libraries() {  // alive as long as the process
  static std::vector<std::unique_ptr<torch::Library>> held;
  return held;
}

template <typename Fn>
void register_cpu_op(const std::string& schema, Fn* kernel) {
  const std::string name = schema.substr(0, schema.find('('));
  if (c10::Dispatcher::singleton().findSchema(c10::OperatorName("yggc::" + name, "")).has_value()) return;
  auto& held = libraries();
  held.push_back(std::make_unique<torch::Library>(torch::Library::FRAGMENT, "yggc", std::nullopt, __FILE__, __LINE__));
  held.back()->def(schema.c_str());
  held.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "yggc", c10::DispatchKey::CPU, __FILE__, __LINE__));
  held.back()->impl(name.c_str(), kernel);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void yggc_register_ops() {  // the one exported symbol
  register_cpu_op("attend_rows_v3(Tensor q, Tensor keys, Tensor values, Tensor mask) -> Tensor", &yggc::attend_rows);
  register_cpu_op("attend_rows_v2(Tensor q, Tensor keys, Tensor values, Tensor mask) -> Tensor",  // packages before v3
                  &yggc::attend_rows_v2);
  register_cpu_op("attend_rows_v1(Tensor q, Tensor keys, Tensor values, Tensor mask) -> Tensor",  // packages before v2
                  &yggc::attend_rows_v1);
  register_cpu_op("tied_head_v2(Tensor x, Tensor packed, int vocab) -> Tensor", &yggc::tied_head);  // 16 or 64 columns
  register_cpu_op("tied_head_v1(Tensor x, Tensor packed, int vocab) -> Tensor", &yggc::tied_head);  // packages before v2
  register_cpu_op("quant_linear_v1(Tensor x, Tensor packed, int format, int n) -> Tensor", &yggc::quant_linear);
  register_cpu_op("verify_tree_inputs_v1(Tensor tokens, Tensor parents, Tensor depth, Tensor cum_logp, Tensor anc, "
                  "int n, int view, int verify) -> Tensor[]", &yggc::verify_tree_inputs);
  register_cpu_op("verify_tree_accept_v1(Tensor logits, Tensor sub_tokens, Tensor rows, Tensor sub_anc, int n, int depth, "
                  "Tensor(a!)? kv_pool, Tensor[] per_row) -> Tensor[]", &yggc::verify_tree_accept);
  yggc::register_package_runner(libraries());
}
