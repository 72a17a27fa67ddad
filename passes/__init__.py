"""The compile pipeline (installed as `yggc.passes`); the runtime never imports it. pipeline.py lists the passes
(PASSES) and runs them over one CompileState (compile_state: its typed fields, and what each pass reads and writes);
job.py holds what a compile was asked for. The other modules hold what the passes call, one concern each: a drafter
kind's compile half (drafter_lowering), lowering (lower, lower_buckets, lower_tensorrt, frozen_export, kernels/), what
an O2 package holds (external_constants, quant_linear, tied_head) and what the bundle keeps beside it (kept_weights),
the C++ compiler and package loads (toolchain, load_probe), reusing lowered packages (package_cache), profiling
(profile, contention), calibration and the tree shape (calibrate, choose_shape, train_predictor, decode_check),
stage plans (plan), tensor-parallel compiles (tensor_parallel_bundle) and writing the bundle (write_bundle)."""
