"""The compile pipeline (installed as `yggc.passes`); the runtime never imports it. pipeline.py lists the passes
(PASSES) and runs them over one CompileState (compile_state: its typed fields, and what each pass reads and writes);
the other modules hold what the passes call, one concern each: a drafter kind's compile half (drafter_lowering),
lowering (lower, lower_buckets, lower_tensorrt, frozen_export, kernels/), profiling (profile, contention), calibration and the
tree shape (calibrate, choose_shape, train_predictor, decode_check), stage plans (plan) and the bundle (write_bundle)."""
